#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#endif

/// `ops`: runs the documents' examples, the benchmark, the soak test, and
/// records traces and dependency graphs.
///
/// Every bad argument ends the process with status 64 (`EX_USAGE`) and a
/// message naming the argument.
@main
enum Ops {
    static var specs: [CommandSpec] { [Demo.spec, Bench.spec, Soak.spec, Trace.spec, Graph.spec] }

    /// Runs the subcommand named `name`, or returns nil if there is none.
    static func run(_ name: String, _ arguments: [String]) async -> Int32? {
        switch name {
        case Demo.spec.name: return await Demo.main(arguments)
        case Bench.spec.name: return await Bench.main(arguments)
        case Soak.spec.name: return await Soak.main(arguments)
        case Trace.spec.name: return await Trace.main(arguments)
        case Graph.spec.name: return await Graph.main(arguments)
        default: return nil
        }
    }

    static let overview = "Operation queues for Swift on Linux: demos, benchmark, soak test, traces and graphs."

    static var help: String {
        var lines = ["OVERVIEW: \(overview)", "", "USAGE: ops <subcommand>", "", "OPTIONS:",
                     "  --version               Show the version.",
                     "  -h, --help              Show help information.", "", "SUBCOMMANDS:"]
        for spec in specs {
            lines.append("  " + TextLayout.pad(spec.name, to: 24) + spec.abstract)
        }
        lines += ["", "  See 'ops <subcommand> --help' for detailed help."]
        return lines.joined(separator: "\n")
    }

    /// Makes standard output line-buffered, then parses and runs the command.
    ///
    /// The C library buffers standard output in blocks of several kilobytes
    /// when it is a pipe or a file, so `ops soak | tee soak.log` would show
    /// its rounds in bursts; one line at a time is what a log reader expects.
    static func main() async {
        // `stdout` is a C global; the @preconcurrency imports above let Swift 6
        // read it here, once, before anything is printed.
        setvbuf(stdout, nil, _IOLBF, 0)
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let first = arguments.first else {
            Console.line(help)
            exit(0)
        }
        arguments.removeFirst()
        switch first {
        case "--version":
            Console.line(operationsVersion)
            exit(0)
        case "--help", "-h":
            Console.line(help)
            exit(0)
        case "help":
            guard let name = arguments.first else {
                Console.line(help)
                exit(0)
            }
            guard let spec = specs.first(where: { $0.name == name }) else {
                let names = specs.map(\.name).joined(separator: ", ")
                Console.error("Error: no help for '\(name)': the subcommands are \(names).\nUsage: ops help [<subcommand>]\n")
                exit(64)
            }
            Console.line(spec.help)
            exit(0)
        default:
            guard let status = await run(first, arguments) else {
                let names = specs.map(\.name).joined(separator: ", ")
                Console.error("Error: unknown subcommand '\(first)'; the subcommands are \(names).\nUsage: ops <subcommand>\n  See 'ops --help' for more information.\n")
                exit(64)
            }
            exit(status)
        }
    }
}
