import Dispatch
import Synchronization
import Testing
@testable import Operations

/// A start by hand racing an add of the same operation on another thread:
/// exactly one of them wins, the other is one misuse, the body runs once,
/// and it sees the winner's carried task-local value (probe 45).
func scenarioHandStartRacingAdd() {
    let misuses = Recorder<OperationMisuse.Code>()
    OperationMisuse.handler = { misuses.record($0.code) }
    let token = OperationContextPropagation.carry(RequestContext.$id)
    defer { token.cancel() }
    let queue = OperationQueue()
    var anomalies: [String] = []
    for round in 0..<2_000 {
        let seen = Recorder<String>()
        let operation = BlockOperation {
            seen.record("\(OperationQueue.current == nil ? "hand" : "queue") saw \(RequestContext.id ?? "nothing")")
        }
        let arrived = Atomic<Int>(0)
        let group = DispatchGroup()
        let racers: [(String, @Sendable () -> Void)] = [
            ("hand", { operation.start() }),
            ("queue", { queue.addOperation(operation) }),
        ]
        for (value, call) in racers {
            DispatchQueue.global().async(group: group) {
                arrived.add(1, ordering: .relaxed)
                while arrived.load(ordering: .relaxed) < 2 {}
                RequestContext.$id.withValue(value) { call() }
            }
        }
        guard group.wait(timeout: .now() + 10) == .success, queue.waitUntilAllOperationsAreFinished(timeout: patience) else {
            anomalies.append("round \(round): hung")
            break
        }
        let reported = misuses.events
        misuses.removeAll()
        let runs = seen.events
        let consistent = runs == ["hand saw hand"] || runs == ["queue saw queue"]
        if reported.count != 1 || !consistent {
            anomalies.append("round \(round): misuses \(reported), bodies \(runs)")
        }
    }
    #expect(anomalies.isEmpty, "\(anomalies.count) of 2,000 rounds: \(anomalies.prefix(5))")
}

@Suite("A start by hand racing an add")
struct HandStartRaceTests {
    @Test("exactly one wins, the other is one misuse; the body runs once and sees the winner's task-local")
    func handStartRacingAdd() async {
        await #expect(processExitsWith: .success) { scenarioHandStartRacingAdd() }
    }
}
