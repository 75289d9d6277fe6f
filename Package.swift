// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Operations",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Operations", targets: ["Operations"]),
        // Optional integrations: each builds its code only with the trait of the same
        // name enabled, and only then fetches the library it integrates with.
        .library(name: "OperationsLogging", targets: ["OperationsLogging"]),
        .library(name: "OperationsMetrics", targets: ["OperationsMetrics"]),
        .library(name: "OperationsTracing", targets: ["OperationsTracing"]),
        // Foundation's `OperationQueue.progress`, for code that uses Foundation's `Progress`.
        .library(name: "OperationsFoundation", targets: ["OperationsFoundation"]),
        .executable(name: "ops", targets: ["ops"]),
    ],
    traits: [
        .trait(name: "Logging", description: "OperationsLogging: misuse, hang and worker-ceiling reports to a swift-log Logger."),
        .trait(name: "Metrics", description: "OperationsMetrics: per-queue gauges, timers and counters through swift-metrics."),
        .trait(name: "Tracing", description: "OperationsTracing: a swift-distributed-tracing span per operation, and ServiceContext carried into bodies."),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
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
        // The command-line tool: `ops demo`, `ops bench`, `ops soak`, `ops trace`, `ops graph`.
        // It parses its own arguments, so that the package depends on nothing unconditionally.
        .executableTarget(
            name: "ops",
            dependencies: [
                "Operations",
                "OperationsStress",
                "BenchOperations",
                "BenchFoundation",
            ]
        ),
        .testTarget(name: "OperationsTests", dependencies: ["Operations", "OperationsStress"]),
        // Foundation bridges (the toolchain's Foundation; nothing fetched).
        .target(name: "OperationsFoundation", dependencies: ["Operations"]),
        .testTarget(name: "OperationsFoundationTests", dependencies: ["Operations", "OperationsFoundation"]),

        // Integrations. Without their trait these targets compile to empty modules and their
        // library is neither fetched nor built (`condition: .when(traits:)`).
        .target(
            name: "OperationsLogging",
            dependencies: [
                "Operations",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging"])),
            ]
        ),
        .target(
            name: "OperationsMetrics",
            dependencies: [
                "Operations",
                .product(name: "CoreMetrics", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
            ]
        ),
        .target(
            name: "OperationsTracing",
            dependencies: [
                "Operations",
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: .when(traits: ["Tracing"])),
            ]
        ),
        // `swift test --traits Logging,Metrics,Tracing --filter OperationsIntegrationTests`;
        // empty without the traits.
        .testTarget(
            name: "OperationsIntegrationTests",
            dependencies: [
                "Operations",
                "OperationsLogging",
                "OperationsMetrics",
                "OperationsTracing",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Logging"])),
                .product(name: "CoreMetrics", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
                .product(name: "MetricsTestKit", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: .when(traits: ["Tracing"])),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing", condition: .when(traits: ["Tracing"])),
            ]
        ),
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
