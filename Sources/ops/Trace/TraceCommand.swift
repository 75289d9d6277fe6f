import Operations
#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#endif

/// `ops trace`: runs a demo or a workload while recording, and writes the
/// trace for Perfetto (Chrome trace-event JSON) and as an SVG timeline.
struct Trace: OpsCommand {
    static let spec = CommandSpec(
        name: "trace",
        abstract: "Record a demo or a workload and write a Perfetto trace and an SVG timeline.",
        discussion: """
            Runs the named demo (see `ops demo --list`) or workload (\(GraphWorkload.names)) \
            with the recorder on, then writes the trace in the Chrome trace-event format, which \
            ui.perfetto.dev and chrome://tracing open (one track per worker thread, one slice per \
            operation, arrows along dependencies, queue counters), and, with --svg, a timeline \
            that any browser shows. Exits with status 1 if the run failed, 64 on a bad argument.
            """,
        options: [
            .init(name: "output", value: "file", help: "Where to write the trace JSON (default trace.json)."),
            .init(name: "svg", value: "file", help: "Also write an SVG timeline here."),
            .init(name: "size", value: "n", help: "Operations in a workload (default 64, at most 100000)."),
            .init(name: "width", value: "n", help: "The workload queue's maxConcurrentOperationCount (default -1: the system decides)."),
            .init(name: "seed", value: "seed", help: "Seed of the random DAG workload."),
        ],
        positionals: [.init(name: "name", help: "A demo or a workload.")]
    )

    let name: String
    let output: String
    let svg: String?
    let workload: GraphWorkload.Parameters

    init(_ arguments: ParsedArguments) throws(UsageError) {
        guard let name = arguments.positionals.first else {
            throw UsageError("Name a demo (\(DemoCatalog.all.map(\.name).joined(separator: ", "))) or a workload (\(GraphWorkload.names)).")
        }
        guard DemoCatalog.named(name) != nil || GraphWorkload(rawValue: name) != nil else {
            throw UsageError("No demo or workload named '\(name)'. The demos are: \(DemoCatalog.all.map(\.name).joined(separator: ", ")); the workloads: \(GraphWorkload.names).")
        }
        self.name = name
        output = arguments.string("output") ?? "trace.json"
        svg = arguments.string("svg")
        workload = try GraphWorkload.Parameters(arguments)
    }

    func run() async -> Int32 {
        let name = self.name
        let workload = self.workload
        // Demos and workloads block while they wait: a thread of their own.
        let (trace, status) = await withCheckedContinuation { (done: CheckedContinuation<(OperationTrace, Int32), Never>) in
            DemoThread.detach(name: "caller") {
                guard OperationTracing.start() else {
                    done.resume(returning: (OperationTracing.stop(), 1))
                    return
                }
                var status: Int32 = 0
                if let demo = DemoCatalog.named(name) {
                    let log = DemoLog()
                    demo.run(log)
                    status = log.failures.isEmpty ? 0 : 1
                } else if let kind = GraphWorkload(rawValue: name) {
                    status = kind.run(workload) ? 0 : 1
                }
                done.resume(returning: (OperationTracing.stop(), status))
            }
        }
        do {
            try FileOutput.write(trace.chromeTraceJSON(), to: output)
            let threads = trace.workers.count == 1 ? "1 thread" : "\(trace.workers.count) threads"
            Console.line("trace: \(trace.operations.count) operations on \(threads) → \(output) (open it in ui.perfetto.dev)")
            if let svg {
                try FileOutput.write(trace.svgTimeline(), to: svg)
                Console.line("trace: timeline → \(svg)")
            }
        } catch {
            Console.error("Error: \(error.message)\n")
            return 1
        }
        if status != 0 { Console.error("trace: the run of '\(name)' failed its checks\n") }
        return status
    }
}

/// `ops graph`: builds a workload's dependency graph and writes it as DOT.
struct Graph: OpsCommand {
    static let spec = CommandSpec(
        name: "graph",
        abstract: "Write a workload's dependency graph in GraphViz DOT.",
        discussion: """
            Builds the named workload (\(GraphWorkload.names)) in a suspended queue and writes its \
            dependency graph in GraphViz's DOT language, coloured by state, dependency cycles in \
            red (the `cycle` workload has one). Render it with `dot -Tsvg graph.dot -o graph.svg`. \
            Exits with status 64 on a bad argument.
            """,
        options: [
            .init(name: "output", value: "file", help: "Where to write the graph (default graph.dot)."),
            .init(name: "size", value: "n", help: "Operations in the workload (default 64, at most 100000)."),
            .init(name: "seed", value: "seed", help: "Seed of the random DAG workload."),
        ],
        positionals: [.init(name: "workload", help: "The workload: \(GraphWorkload.names).")]
    )

    let kind: GraphWorkload
    let output: String
    let workload: GraphWorkload.Parameters

    init(_ arguments: ParsedArguments) throws(UsageError) {
        guard let name = arguments.positionals.first, let kind = GraphWorkload(rawValue: name) else {
            throw UsageError("Name a workload: \(GraphWorkload.names)\(arguments.positionals.first.map { "; got '\($0)'" } ?? "").")
        }
        self.kind = kind
        output = arguments.string("output") ?? "graph.dot"
        workload = try GraphWorkload.Parameters(arguments)
    }

    func run() async -> Int32 {
        let queue = OperationQueue()
        queue.name = "ops graph \(kind.rawValue)"
        queue.isSuspended = true
        let operations = kind.build(workload)
        queue.addOperations(operations, waitUntilFinished: false)
        let dot = queue.dependencyGraphDOT()
        // Nothing runs: cancelled operations are retired without their work.
        queue.cancelAllOperations()
        queue.isSuspended = false
        do {
            try FileOutput.write(dot, to: output)
        } catch {
            Console.error("Error: \(error.message)\n")
            return 1
        }
        Console.line("graph: \(operations.count) operations → \(output) (render it with `dot -Tsvg \(output) -o graph.svg`)")
        return 0
    }
}

/// Writing a whole file.
enum FileOutput {
    static func write(_ text: String, to path: String) throws(UsageError) {
        guard let file = fopen(path, "w") else {
            throw UsageError("cannot write '\(path)': \(String(cString: strerror(errno))).")
        }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, file) }
        let closed = fclose(file)
        guard written == bytes.count, closed == 0 else {
            throw UsageError("could not write all of '\(path)': \(String(cString: strerror(errno))).")
        }
    }
}
