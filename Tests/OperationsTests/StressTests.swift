import Operations
import OperationsStress
import Testing

/// The seeded stress engine (see `StressRunner` for the invariants). The
/// rounds are short so that the suite stays fast under the sanitizers; the
/// long runs are `swift run -c release ops soak`.
@Suite("Stress", .serialized)
struct StressTests {
    static let seeds: [UInt64] = [0x5EED_0001, 0x5EED_0002, 0x5EED_0003]

    @Test("A short seeded round breaks no invariant and drains every queue", arguments: seeds)
    func shortSeededRound(seed: UInt64) {
        let configuration = StressConfiguration(seed: seed, operations: 3_000, queues: 5, waitTimeout: .seconds(60))
        let plan = StressPlan(configuration: configuration)
        let report = StressRunner.run(configuration) { print($0) }
        let rerun = "rerun: swift run ops soak --seed \(seed) --rounds 1 --operations-per-round 3000 --queues 5"
        let details = report.violations.prefix(20).map(\.description).joined(separator: "\n")
        #expect(report.violationCount == 0, "stress seed \(seed) (\(rerun)): \(report)\n\(details)")
        #expect(report.queuesDrained, "stress seed \(seed) (\(rerun)): the queues did not drain: \(report)")
        // The round really ran the mix it planned.
        #expect(report.planFingerprint == plan.fingerprint)
        #expect(report.operationsRun >= plan.operations.count * 9 / 10, "stress seed \(seed): \(report)")
        #expect(report.barriers == plan.barrierCount, "stress seed \(seed): \(report)")
        #expect(report.startedByHand > 0, "stress seed \(seed): \(report)")
        #expect(report.cancelled > 0, "stress seed \(seed): \(report)")
        #expect(report.bodiesRun > plan.operations.count / 2, "stress seed \(seed): \(report)")
    }

    @Test("The generator is deterministic for a given seed")
    func generatorIsDeterministic() {
        // SplitMix64's published sequence for seed 0.
        var random = StressRandom(seed: 0)
        #expect(random.next() == 0xE220_A839_7B1D_CDAF)
        #expect(random.next() == 0x6E78_9E6A_A1B9_65F4)
        #expect(random.next() == 0x06C4_5D18_8009_454F)

        var first = StressRandom(seed: 42, stream: 7)
        var second = StressRandom(seed: 42, stream: 7)
        var other = StressRandom(seed: 42, stream: 8)
        let a = (0..<64).map { _ in first.below(1000) }
        let b = (0..<64).map { _ in second.below(1000) }
        let c = (0..<64).map { _ in other.below(1000) }
        #expect(a == b)
        #expect(a != c)
        #expect(a.allSatisfy { (0..<1000).contains($0) })

        let configuration = StressConfiguration(seed: 0xABCDEF, operations: 2_000, queues: 6)
        let plan = StressPlan(configuration: configuration)
        let again = StressPlan(configuration: configuration)
        #expect(plan == again)
        #expect(plan.fingerprint == again.fingerprint)
        var reseeded = configuration
        reseeded.seed += 1
        #expect(StressPlan(configuration: reseeded).fingerprint != plan.fingerprint)
        #expect(plan.operations.count == 2_000)
        #expect(plan.queues.count == 6)
    }

    @Test("Planned dependencies point only to operations that exist earlier, so they cannot form a cycle")
    func planIsAcyclic() {
        let plan = StressPlan(configuration: StressConfiguration(seed: 0x5EED_0001, operations: 5_000))
        var driverAdded = Set<Int>()
        for step in plan.steps {
            let indices: [Int]
            switch step {
            case .add(let index): indices = [index]
            case .addBatch(_, let batch): indices = batch
            case .waitForOperation(let index):
                #expect(driverAdded.contains(index))
                continue
            case .barrier, .waitForQueue: continue
            }
            for index in indices {
                let spec = plan.operations[index]
                #expect(spec.origin == .driver)
                // A driver operation depends only on operations the driver added before it.
                #expect(spec.dependencies.allSatisfy(driverAdded.contains), "op \(index): \(spec.dependencies)")
                driverAdded.insert(index)
                for child in spec.children {
                    let childSpec = plan.operations[child]
                    #expect(childSpec.origin == .child(of: index))
                    #expect(childSpec.dependencies.allSatisfy { $0 < child && ($0 == index || driverAdded.contains($0) || spec.children.contains($0)) })
                }
            }
        }
        #expect(plan.operations.allSatisfy { op in op.dependencies.allSatisfy { $0 < op.index } })
    }

    @Test("A round that cannot drain is reported, with a dump of the queues, instead of hanging")
    func hangBecomesViolation() {
        let configuration = StressConfiguration(
            seed: 0x5EED_0004,
            operations: 300,
            queues: 4,
            waitTimeout: .seconds(30),
            drainTimeout: .milliseconds(300),
            injectedFault: .leaveQueueSuspended
        )
        let report = StressRunner.run(configuration)
        #expect(!report.passed)
        #expect(!report.queuesDrained)
        let timeouts = report.violations.filter { $0.kind == .timeout }
        #expect(timeouts.count == 1, "\(report.violations)")
        #expect(timeouts.first?.message.contains("state dump") == true)
        #expect(timeouts.first?.message.contains("suspended") == true)
        #expect(timeouts.first?.message.contains("seed \(configuration.seed)") == true)
    }
}
