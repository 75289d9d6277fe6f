// Dependent keys (`keyPathsForValuesAffectingValue(forKey:)`) followed as
// Foundation's KVO follows them: through every level, and for keys that
// observers registered by name, not only for the lifecycle keys. And an
// unnamed key-path observer whose getter announces a key. All three found
// by probe 41.

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// `isExecuting` and `isFinished` depend on `status`, which depends on
/// `rawStatus`: the class announces only `rawStatus`.
private final class TwoLevelOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `raw` is atomic.
    private let raw = Atomic<Int>(0)

    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        switch key {
        case "isExecuting", "isFinished": return ["status"]
        case "status": return ["rawStatus"]
        default: return super.keyPathsForValuesAffectingValue(forKey: key)
        }
    }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { raw.load(ordering: .acquiring) == 1 }
    override var isFinished: Bool { raw.load(ordering: .acquiring) == 2 }

    private func set(_ value: Int) {
        willChangeValue(forKey: "rawStatus")
        raw.store(value, ordering: .releasing)
        didChangeValue(forKey: "rawStatus")
    }

    override func start() {
        set(1)
        DispatchQueue.global().async { self.set(2) }
    }
}

/// A key of its own, `summary`, that depends on another, `state`.
private final class SummaryOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: written only by the test's thread.
    var state = 0

    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        key == "summary" ? ["state"] : super.keyPathsForValuesAffectingValue(forKey: key)
    }

    func bump() {
        willChangeValue(forKey: "state")
        state += 1
        didChangeValue(forKey: "state")
    }
}

/// A final class whose `isExecuting` getter announces a key of its own
/// (bookkeeping on every read). Observed by key path, `\.isExecuting` has
/// no name here and is re-read on every announcement.
private final class AnnouncingGetterOperation: Operation, @unchecked Sendable {
    override var isExecuting: Bool {
        willChangeValue(forKey: "lastPolled")
        didChangeValue(forKey: "lastPolled")
        return super.isExecuting
    }
}

@Suite("Dependent keys, as KVO follows them")
struct TransitiveDependentKeyTests {
    @Test("a key two levels below isFinished: announcing it finishes the operation in its queue, and observers of each level hear it")
    func twoLevels() {
        let queue = makeQueue("dependent-two-levels")
        let operation = TwoLevelOperation()
        let heard = Recorder<String>()
        let tokens = ["status", "isFinished"].map { key in
            operation.observe(key: key) { _, _ in heard.record(key) }
        }
        defer { tokens.forEach { $0.invalidate() } }
        queue.addOperation(operation)
        #expect(operation.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // Each `rawStatus` announcement announces both levels (as KVO does,
        // whether or not the value changed): executing, then finished.
        #expect(heard.events.filter { $0 == "status" }.count == 2)
        #expect(heard.events.filter { $0 == "isFinished" }.count == 2)
    }

    @Test("a key of its own that depends on another: its observers by name hear the will and the did")
    func ownDependentKey() {
        let operation = SummaryOperation()
        let heard = Recorder<String>()
        let token = operation.observe(key: "summary", options: [.prior]) { _, change in
            heard.record(change.isPrior ? "will summary" : "did summary")
        }
        defer { token.invalidate() }
        operation.bump()
        #expect(heard.events == ["will summary", "did summary"])
    }

    @Test("an unnamed key-path observer whose getter announces another key does not recurse")
    func getterThatAnnounces() async {
        await #expect(processExitsWith: .success) { scenarioGetterThatAnnounces() }
    }
}

/// Observes `\.isExecuting` on `AnnouncingGetterOperation` and starts it:
/// before the fix, the re-read announced, which re-read, until the stack
/// overflowed.
private func scenarioGetterThatAnnounces() {
    let operation = AnnouncingGetterOperation()
    let heard = Recorder<Bool>()
    let token = operation.observe(\.isExecuting, options: [.new]) { _, change in heard.record(change.newValue!) }
    operation.start()
    token.invalidate()
    precondition(operation.isFinished, "the operation did not finish")
    precondition(heard.events == [true, false], "observer heard \(heard.events)")
}

