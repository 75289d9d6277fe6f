import Synchronization
import Testing
@testable import Operations

/// Every will-change reaches observers as a matched pair: `.prior` then the
/// change, with the old value read before the change.
@Suite("observation: will/did balance")
struct ObservationBalanceTests {
    private func record(_ operation: Operation, _ log: EventLog) -> [KeyValueObservation] {
        [
            operation.observe(\.isReady, options: [.old, .new, .prior]) { _, change in
                log.append("isReady \(change.isPrior ? "prior " : "")\(String(describing: change.oldValue)) \(String(describing: change.newValue))")
            },
            operation.observe(\.dependencies, options: [.prior]) { _, change in
                log.append("dependencies\(change.isPrior ? " prior" : "")")
            },
        ]
    }

    @Test("removeDependency reports isReady NO→YES with its old value, nested inside the dependencies change")
    func removeDependencyOldValue() {
        let operation = BlockOperation {}
        let dependency = BlockOperation {}
        operation.addDependency(dependency)
        let log = EventLog()
        let tokens = record(operation, log)
        operation.removeDependency(dependency)
        #expect(log.all == [
            "dependencies prior", "isReady prior Optional(false) nil",
            "isReady Optional(false) Optional(true)", "dependencies",
        ])
        withExtendedLifetime(tokens) {}
    }

    @Test("adding a finished dependency does not announce isReady")
    func finishedDependency() {
        let operation = BlockOperation {}
        let finished = BlockOperation {}
        finished.start()
        let log = EventLog()
        let tokens = record(operation, log)
        operation.addDependency(finished)
        #expect(log.all == ["dependencies prior", "dependencies"])
        #expect(operation.isReady)
        withExtendedLifetime(tokens) {}
    }

    @Test("a duplicate or refused dependency (cycle reporting on) announces nothing")
    func duplicateAndCycle() {
        let first = BlockOperation {}
        let second = BlockOperation {}
        second.addDependency(first)
        let log = EventLog()
        let tokens = record(second, log) + record(first, log)
        second.addDependency(first)
        let refused = LockedValue<[OperationMisuse.Code]>([])
        OperationMisuse.withDependencyCycleReporting {
            OperationMisuse.withHandler({ misuse in refused.withLock { $0.append(misuse.code) } }) {
                first.addDependency(second)
            }
        }
        #expect(refused.withLock { $0 } == [.dependencyCycle])
        #expect(log.all.isEmpty)
        #expect(first.dependencies.isEmpty)
        withExtendedLifetime(tokens) {}
    }
}
