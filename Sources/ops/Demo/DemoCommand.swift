
/// One example from the specification documents, reproduced with this
/// library, narrated line by line and checked.
struct DemoCase: Sendable {
    /// The name given on the command line.
    let name: String
    /// One line for `ops demo --list`.
    let summary: String
    /// What the demo reproduces: the source documents and their parts.
    let sources: [DemoCitation]
    /// One sentence: what the demo shows.
    let shows: String
    /// One sentence: what to look for in its output.
    let lookFor: String
    /// Runs the example, recording what happens and checking it in `log`.
    let run: @Sendable (DemoLog) -> Void
}

/// Every demo, in the order `ops demo` runs them.
enum DemoCatalog {
    static let all: [DemoCase] = [
        AsyncFanInDemo.demo,
        StateSequencesDemo.demo,
        SerialQueueDemo.demo,
        TicketSaleDemo.demo,
        SuspendedQueueDemo.demo,
        ConcurrentOperationDemo.demo,
        CancellationDemo.demo,
        InvocationDemo.demo,
        ManualStartDemo.demo,
    ]

    static func named(_ name: String) -> DemoCase? {
        all.first { $0.name == name }
    }
}

/// `ops demo`: runs the documents' examples and checks their outcomes.
///
/// Each demo prints what happens in order — operations, the threads they run
/// on, their state changes as `op isExecuting NO→YES` — then checks the
/// outcome. The command exits with status 1 if any check failed, and 3 if a
/// demo hangs (a watchdog ends it).
struct Demo: OpsCommand {
    static let spec = CommandSpec(
        name: "demo",
        abstract: "Run the documents' examples and check their outcomes.",
        discussion: """
            Without a name, runs every demo in order. `ops demo --list` shows the names, one line each. \
            Each demo names the document it reproduces, says what it shows and what to look for, \
            then prints what happens and checks it. Exits with status 1 if a check fails, 3 if a \
            demo hangs, 64 on a bad argument.
            """,
        options: [.init(name: "list", value: nil, help: "List the demos with a one-line description.")],
        positionals: [.init(name: "name", help: "The demo to run (default: all, in order).")]
    )

    let list: Bool
    let name: String?

    /// How long one demo may take before the watchdog declares a hang.
    static let watchdogSeconds = 60

    init(_ arguments: ParsedArguments) throws(UsageError) {
        list = arguments.flag("list")
        name = arguments.positionals.first
        if let name, DemoCatalog.named(name) == nil {
            let names = DemoCatalog.all.map(\.name).joined(separator: ", ")
            throw UsageError("No demo named '\(name)'. The demos are: \(names).")
        }
    }

    func run() async -> Int32 {
        let list = self.list
        let name = self.name
        // The demos block while they wait, so they run on a thread of their
        // own, named `caller` in the output, not on a Swift task thread.
        return await withCheckedContinuation { (done: CheckedContinuation<Int32, Never>) in
            DemoThread.detach(name: "caller") {
                done.resume(returning: Self.runDemos(list: list, name: name))
            }
        }
    }

    /// Lists or runs the demos; returns the exit status.
    private static func runDemos(list: Bool, name: String?) -> Int32 {
        if list {
            let width = DemoCatalog.all.map(\.name.count).max() ?? 0
            for demo in DemoCatalog.all {
                Console.line(TextLayout.pad(demo.name, to: width + 2) + demo.summary)
            }
            return 0
        }
        let selected = name.flatMap(DemoCatalog.named).map { [$0] } ?? DemoCatalog.all
        var failed: [(name: String, failures: [String])] = []
        var checks = 0
        for demo in selected {
            let log = DemoLog()
            printHeader(demo)
            let watchdog = Watchdog(demo: demo.name, seconds: watchdogSeconds)
            demo.run(log)
            watchdog.disarm()
            let failures = log.failures
            checks += log.checkCount
            if failures.isEmpty {
                Console.line("\n  \(demo.name): passed (\(log.checkCount) checks)\n")
            } else {
                Console.line("\n  \(demo.name): FAILED (\(failures.count) of \(log.checkCount) checks)\n")
                failed.append((demo.name, failures))
            }
        }
        if failed.isEmpty {
            Console.line("All \(selected.count) demo\(selected.count == 1 ? "" : "s") passed (\(checks) checks).")
            return 0
        }
        var report = "\(failed.count) of \(selected.count) demo\(selected.count == 1 ? "" : "s") failed:\n"
        for (name, failures) in failed {
            for failure in failures { report += "  \(name): \(failure)\n" }
        }
        Console.error(report)
        return 1
    }

    /// The demo's name, its sources, and two lines: what it shows and what
    /// to look for in its output.
    private static func printHeader(_ demo: DemoCase) {
        let title = "== \(demo.name) "
        Console.line(title + String(repeating: "=", count: max(4, 78 - title.count)))
        var lines: [String] = []
        for citation in demo.sources {
            lines += TextLayout.wrap(citation.text, first: "   Source:   ", rest: "             ")
        }
        lines += TextLayout.wrap(demo.shows, first: "   Shows:    ", rest: "             ")
        lines += TextLayout.wrap(demo.lookFor, first: "   Look for: ", rest: "             ")
        Console.line(lines.joined(separator: "\n"))
    }
}
