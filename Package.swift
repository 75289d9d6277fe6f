// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Operations",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Operations", targets: ["Operations"]),
        .executable(name: "ops", targets: ["ops"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        // The core library: no Foundation; only the toolchain's Dispatch and Synchronization.
        .target(name: "Operations"),
        // Seeded stress engine, shared by the test suite and `ops soak`.
        .target(name: "OperationsStress", dependencies: ["Operations"]),
        // Benchmark workloads. One source file, compiled twice: against this
        // library, and (with ENGINE_FOUNDATION) against Foundation's classes.
        .target(name: "BenchOperations", dependencies: ["Operations"]),
        .target(
            name: "BenchFoundation",
            swiftSettings: [.define("ENGINE_FOUNDATION")]
        ),
        // The command-line tool: `ops demo`, `ops bench`, `ops soak`.
        .executableTarget(
            name: "ops",
            dependencies: [
                "Operations",
                "OperationsStress",
                "BenchOperations",
                "BenchFoundation",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "OperationsTests", dependencies: ["Operations", "OperationsStress"]),
    ],
    swiftLanguageModes: [.v6]
)

// Documentation: `OPERATIONS_DOCS=1 swift package generate-documentation --target Operations`
// (or `bash Scripts/check-docs.sh`). The DocC plugin is added only when OPERATIONS_DOCS is set,
// so a package that depends on this one never fetches or resolves swift-docc-plugin.
if Context.environment["OPERATIONS_DOCS"] != nil {
    package.dependencies.append(
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0")
    )
}
