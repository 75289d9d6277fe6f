import ArgumentParser
#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#endif

/// `ops`: runs the documents' examples, the benchmark and the soak test.
///
/// Every bad argument ends the process with status 64 (`EX_USAGE`) and a
/// message naming the argument: ArgumentParser reports parse errors and the
/// `ValidationError`s thrown by each command's `validate()` with that status.
@main
struct Ops: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ops",
        abstract: "Operation queues for Swift on Linux: demos, benchmark, soak test.",
        version: operationsVersion,
        subcommands: [Demo.self, Bench.self, Soak.self]
    )

    /// Makes standard output line-buffered, then parses and runs the command.
    ///
    /// The C library buffers standard output in blocks of several kilobytes
    /// when it is a pipe or a file, so `ops soak | tee soak.log` would show
    /// its rounds in bursts; one line at a time is what a log reader expects.
    static func main() async {
        // `stdout` is a C global; the @preconcurrency imports above let Swift 6
        // read it here, once, before anything is printed.
        setvbuf(stdout, nil, _IOLBF, 0)
        await main(nil)
    }
}
