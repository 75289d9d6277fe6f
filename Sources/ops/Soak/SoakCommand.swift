import OperationsStress

/// `ops soak`: runs seeded stress rounds with successive seeds until the
/// time (or the number of rounds) is up, and fails on any violation.
struct Soak: OpsCommand, Sendable {
    static let spec = CommandSpec(
        name: "soak",
        abstract: "Run the seeded stress test for a while.",
        discussion: """
            Each round generates its queues, operations and chaos from its seed, runs them, \
            and checks the invariants (every operation finishes once, dependencies, barriers, \
            width limits, suspension, completion blocks, draining, bounded waits, pending limits, \
            async bodies, observers that wait or add, deliberate misuses, and a weak-reference \
            census proving that no operation, closure or queue outlives the round). Rounds use \
            successive seeds. A failing round prints its seed and the command that reruns it. \
            Exits with status 1 on any violation, 64 on a bad argument. \
            Examples: `ops soak --minutes 2`; `ops soak --seed 42 --rounds 1 --operations-per-round 100000`.
            """,
        options: [
            .init(name: "minutes", value: "minutes", help: "Minutes to keep starting rounds for (default 1 when --rounds is not given); the first round always runs."),
            .init(name: "seed", value: "seed", help: "Seed of the first round, decimal or 0x-hexadecimal (default: random)."),
            .init(name: "rounds", value: "rounds", help: "Stop after this many rounds."),
            .init(name: "operations-per-round", value: "n", help: "Operations generated per round, 1 to 10000000 (default 100000)."),
            .init(name: "queues", value: "n", help: "Queues per round, 1 to 10000 (default 5)."),
            .init(name: "wait-timeout", value: "seconds", help: "Bound, in seconds, on every wait of a round (a wait that reaches it is a violation; default 60)."),
            .init(name: "no-barriers", value: nil, help: "Generate no barrier blocks (for hunting other bugs while a barrier bug is open)."),
            .init(name: "no-chaos", value: nil, help: "Run without the chaos threads (suspend, resize, cancel, outside waits)."),
            .init(name: "check-invariants", value: nil, help: "Call OperationQueue._checkInvariants() on every queue after every driver step (on by default in debug builds)."),
            .init(name: "blocking-observers", value: nil, help: "Give some operations an isFinished observer that waits (bounded) for an older operation (on by default; the flag is kept for older rerun lines)."),
            .init(name: "no-blocking-observers", value: nil, help: "Give no operation an isFinished observer that waits for another operation."),
            .init(name: "inject-fault", value: "fault", help: "Inject a deliberate fault into the engine, to see the checks fire: \(StressConfiguration.InjectedFault.allCases.map { String(describing: $0) }.joined(separator: ", "))."),
            .init(name: "describe-operation", value: "index", help: "Print the plan of the first round around this operation, and exit."),
        ],
        positionals: []
    )

    let minutes: Double?
    let seed: UInt64?
    let rounds: Int?
    let operationsPerRound: Int
    let queues: Int
    let waitTimeout: Int
    let noBarriers: Bool
    let noChaos: Bool
    let checkInvariants: Bool
    let blockingObservers: Bool
    let fault: StressConfiguration.InjectedFault
    let describeOperation: Int?

    /// The longest soak `--minutes` accepts: a year.
    static let maximumMinutes = 525_600.0
    /// The most operations a round may generate (`--operations-per-round`):
    /// a round holds them all at once.
    static let maximumOperationsPerRound = 10_000_000
    /// The most queues a round may have (`--queues`).
    static let maximumQueues = 10_000
    /// The longest `--wait-timeout` accepts: a day.
    static let maximumWaitSeconds = 86_400

    init(_ arguments: ParsedArguments) throws(UsageError) {
        minutes = try arguments.number("minutes")
        rounds = try arguments.integer("rounds", as: Int.self)
        operationsPerRound = try arguments.integer("operations-per-round", as: Int.self) ?? 100_000
        queues = try arguments.integer("queues", as: Int.self) ?? 5
        waitTimeout = try arguments.integer("wait-timeout", as: Int.self) ?? 60
        noBarriers = arguments.flag("no-barriers")
        noChaos = arguments.flag("no-chaos")
        checkInvariants = arguments.flag("check-invariants")
        if arguments.flag("blocking-observers"), arguments.flag("no-blocking-observers") {
            throw UsageError("--blocking-observers and --no-blocking-observers contradict each other.")
        }
        blockingObservers = !arguments.flag("no-blocking-observers")
        describeOperation = try arguments.integer("describe-operation", as: Int.self)
        if let minutes, !(minutes > 0 && minutes <= Self.maximumMinutes) {
            throw UsageError("--minutes must be a number of minutes above 0 and at most \(Int(Self.maximumMinutes)) (a year); got \(minutes).")
        }
        if let rounds, rounds <= 0 { throw UsageError("--rounds must be at least 1; got \(rounds).") }
        if !(1...Self.maximumOperationsPerRound).contains(operationsPerRound) {
            throw UsageError("--operations-per-round must be between 1 and \(Self.maximumOperationsPerRound); got \(operationsPerRound).")
        }
        if !(1...Self.maximumQueues).contains(queues) {
            throw UsageError("--queues must be between 1 and \(Self.maximumQueues); got \(queues).")
        }
        if !(1...Self.maximumWaitSeconds).contains(waitTimeout) {
            throw UsageError("--wait-timeout must be between 1 and \(Self.maximumWaitSeconds) seconds (a day); got \(waitTimeout).")
        }
        if let describeOperation, describeOperation < 0 {
            throw UsageError("--describe-operation must be an operation index, 0 or more; got \(describeOperation).")
        }
        if let name = arguments.string("inject-fault") {
            guard let fault = StressConfiguration.InjectedFault.allCases.first(where: { String(describing: $0) == name }) else {
                let names = StressConfiguration.InjectedFault.allCases.map { String(describing: $0) }
                throw UsageError("--inject-fault must be one of \(names.joined(separator: ", ")).")
            }
            self.fault = fault
        } else {
            fault = .none
        }
        if let text = arguments.string("seed") {
            guard let seed = Self.parseSeed(text) else {
                throw UsageError("--seed must be a decimal or 0x-hexadecimal number from 0 to 2^64-1; got '\(text)'.")
            }
            self.seed = seed
        } else {
            seed = nil
        }
    }

    static func parseSeed(_ text: String) -> UInt64? {
        if text.hasPrefix("0x") || text.hasPrefix("0X") { return UInt64(text.dropFirst(2), radix: 16) }
        return UInt64(text)
    }

    func run() async -> Int32 {
        // The rounds block while they wait, and their async bodies need the
        // cooperative pool: they run on a thread of their own.
        await withCheckedContinuation { (done: CheckedContinuation<Int32, Never>) in
            DemoThread.detach(name: "soak") { done.resume(returning: runRounds()) }
        }
    }

    private func runRounds() -> Int32 {
        let clock = ContinuousClock()
        let started = clock.now
        let firstSeed = seed ?? UInt64.random(in: 0...UInt64.max)
        let budget: Duration? = minutes.map { .milliseconds(Int($0 * 60_000)) } ?? (rounds == nil ? .seconds(60) : nil)
        let roundLimit = rounds ?? Int.max
        print("soak: first seed \(firstSeed), \(operationsPerRound) operations per round, \(queues) queues, "
            + (budget.map { "for \(Self.format($0))" } ?? "\(roundLimit) round(s)")
            + (rounds != nil && budget != nil ? " or \(roundLimit) round(s)" : ""))

        if let describeOperation {
            let plan = StressPlan(configuration: StressConfiguration(seed: firstSeed, operations: operationsPerRound, queues: queues, barriers: !noBarriers, blockingObservers: blockingObservers))
            print(plan.describe(operation: describeOperation))
            return 0
        }
        var roundsRun = 0
        var operationsRun = 0
        var bodiesRun = 0
        var violations = 0
        var failedSeeds: [UInt64] = []
        while roundsRun < roundLimit {
            // The first round always runs, however short the budget.
            if let budget, roundsRun > 0, clock.now - started >= budget { break }
            let roundSeed = firstSeed &+ UInt64(roundsRun)
            let configuration = StressConfiguration(
                seed: roundSeed,
                operations: operationsPerRound,
                queues: queues,
                waitTimeout: .seconds(waitTimeout),
                barriers: !noBarriers,
                chaos: !noChaos,
                installsProcessWideMisuseHandler: true,
                injectedFault: fault,
                checksInvariants: checkInvariants || _isDebugAssertConfiguration(),
                blockingObservers: blockingObservers,
                accessorRaces: true
            )
            let report = StressRunner.run(configuration)
            roundsRun += 1
            operationsRun += report.operationsRun
            bodiesRun += report.bodiesRun
            violations += report.violationCount
            let rate = Self.rate(report.operationsRun, report.elapsed)
            print("round \(roundsRun): \(report) (\(rate) operations/s)")
            if !report.passed {
                failedSeeds.append(roundSeed)
                for violation in report.violations { print("  violation: \(violation)") }
                if report.violationCount > report.violations.count {
                    print("  … and \(report.violationCount - report.violations.count) more")
                }
                if !report.queuesDrained && report.violationCount == 0 { violations += 1 }
                print("  rerun: swift run -c release ops soak --seed \(roundSeed) --rounds 1 --operations-per-round \(operationsPerRound) --queues \(queues)\(noBarriers ? " --no-barriers" : "")\(noChaos ? " --no-chaos" : "")\(checkInvariants ? " --check-invariants" : "")\(blockingObservers ? "" : " --no-blocking-observers")")
            }
        }
        let elapsed = clock.now - started
        let lastSeed = firstSeed &+ UInt64(max(0, roundsRun - 1))
        print("soak total: \(roundsRun) rounds, \(operationsRun) operations run (\(bodiesRun) bodies), violations \(violations), seeds \(firstSeed)...\(lastSeed), \(Self.format(elapsed)) (\(Self.rate(operationsRun, elapsed)) operations/s)")
        if violations > 0 {
            print("soak FAILED: failing seeds \(failedSeeds)")
            return 1
        }
        print("soak passed")
        return 0
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func format(_ duration: Duration) -> String {
        let value = seconds(duration)
        return String(Double(Int(value * 100)) / 100) + " s"
    }

    static func rate(_ count: Int, _ duration: Duration) -> Int {
        let value = seconds(duration)
        return value > 0 ? Int(Double(count) / value) : 0
    }
}
