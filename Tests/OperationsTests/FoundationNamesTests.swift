// Names and overloads that ported code expects to find, each found missing
// (or colliding) by compiling a real project's sources against the library
// (ports 37): `NSKeyValueObservation` (OTCore), `debugDescription`
// (swift-executor), and a project's own timed wait named like the library's
// (OTCore's `waitUntilAllOperationsAreFinished(timeout: DispatchTimeInterval)`).
// And Foundation's plain adds inside `async` functions (probe 48): the
// library's suspending adds once shared their name, and an `async` overload
// wins in `async` code, so `queue.addOperation(op)` there needed `await`.

import Dispatch
import Testing
@testable import Operations

/// OTCore's extension, reduced: before the library's overload was
/// disfavoured, `timeout: .seconds(1)` matched both and did not compile.
fileprivate extension OperationQueue {
    func waitUntilAllOperationsAreFinished(timeout: DispatchTimeInterval) -> DispatchTimeoutResult {
        let group = DispatchGroup()
        group.enter()
        DispatchQueue.global().async {
            self.waitUntilAllOperationsAreFinished()
            group.leave()
        }
        return group.wait(timeout: .now() + timeout)
    }
}

private final class DescribedOperation: Operation, @unchecked Sendable {
    override var debugDescription: String { "described" }
}

/// Equal by a key, as an `NSObject` subclass overriding `isEqual(_:)` and
/// `hash` is (probe 50: neither could be overridden).
private final class KeyedOperation: Operation, @unchecked Sendable {
    let key: Int
    init(key: Int) { self.key = key }
    override func isEqual(_ object: Any?) -> Bool { (object as? KeyedOperation)?.key == key }
    override var hash: Int { key }
}

/// A block operation that turns automatic notifications off for the
/// lifecycle keys it announces by hand, as Apple-platform code does
/// (probe 50: the override did not compile).
private final class ManualNotifyingOperation: BlockOperation, @unchecked Sendable {
    override class func automaticallyNotifiesObservers(forKey key: String) -> Bool {
        key == "isFinished" ? false : super.automaticallyNotifiesObservers(forKey: key)
    }
}

@Suite("Foundation names in ported code")
struct FoundationNamesTests {
    @Test("a project's own timed wait named like the library's is chosen for arguments both accept")
    func projectTimedWaitWins() {
        let queue = makeQueue("project-timed-wait")
        queue.addOperation {}
        let result = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(5))
        #expect(result == .success)
        // The library's own, with a `Duration`, is still there.
        let finished: Bool = queue.waitUntilAllOperationsAreFinished(timeout: patience)
        #expect(finished)
    }

    @Test("NSKeyValueObservation and NSKeyValueObservedChange name the library's observation types")
    func observationNames() {
        let op = BlockOperation {}
        let heard = Recorder<Bool>()
        var tokens: [NSKeyValueObservation] = []
        tokens.append(op.observe(\.isFinished, options: [.new]) { (_, change: NSKeyValueObservedChange<Bool>) in
            heard.record(change.newValue == true)
        })
        op.start()
        #expect(heard.events == [true])
        tokens.forEach { $0.invalidate() }
    }

    @Test("debugDescription exists on operations and queues, defaults to description, and can be overridden")
    func debugDescriptions() {
        let op = BlockOperation {}
        op.name = "debugged"
        #expect(op.debugDescription == op.description)
        #expect(String(reflecting: op) == op.description)
        let queue = makeQueue("debugged-queue")
        #expect(queue.debugDescription == queue.description)
        let described: Operation = DescribedOperation()
        #expect(described.debugDescription == "described")
    }

    /// Compiling this file is half the test: before the suspending adds were
    /// renamed (`addOperationWhenRoom`), the three plain adds below did not
    /// compile without `await`.
    @Test("Foundation's plain adds compile in async functions without await, and stay synchronous there")
    func plainAddsInAsyncCode() async {
        let queue = makeQueue("plain-adds-async")
        let ran = Counter()
        let operation = BlockOperation { ran.increment() }
        queue.addOperation(operation)
        queue.addOperation { ran.increment() }
        queue.addOperations([BlockOperation { ran.increment() }], waitUntilFinished: false)
        #expect(await waitUntilAsync { ran.count == 3 })

        // They are the synchronous adds, which follow the limit's policy
        // (here: refuse at once), not the suspending ones.
        let full = makeQueue("plain-adds-async-full", width: 1)
        let gate = Gate()
        full.setPendingLimit(1, policy: .reject)
        full.addOperation { gate.wait() }
        let refused = BlockOperation { ran.increment() }
        full.addOperation(refused)
        #expect(refused.isCancelled)
        gate.open()
        #expect(await waitUntilAsync { refused.isFinished && full.operationCount == 0 })
        #expect(ran.count == 3)
    }

    @Test("isEqual(_:) and hash exist as NSObject has them, == and Hashable use them, and overrides take effect")
    func equalityAsNSObject() {
        let a = BlockOperation {}
        let b = BlockOperation {}
        #expect(a.isEqual(a) && !a.isEqual(b) && !a.isEqual(nil) && !a.isEqual("a"))
        #expect(a == a && a != b)
        let hash: Int = a.hash
        #expect(hash == a.hash)
        #expect(Set<Operation>([a, b, a]).count == 2)
        let first = KeyedOperation(key: 7)
        let second = KeyedOperation(key: 7)
        #expect(first == second && first !== second)
        #expect(Set<Operation>([first, second, KeyedOperation(key: 8)]).count == 2)
        let queue = makeQueue("equality")
        #expect(queue.isEqual(queue) && !queue.isEqual(makeQueue("other")) && queue.hash == queue.hash)
    }

    @Test("automaticallyNotifiesObservers(forKey:) can be overridden as on NSObject, and changes nothing")
    func automaticNotificationsOverride() {
        #expect(Operation.automaticallyNotifiesObservers(forKey: "name"))
        #expect(!ManualNotifyingOperation.automaticallyNotifiesObservers(forKey: "isFinished"))
        let operation = ManualNotifyingOperation {}
        let heard = Recorder<Bool>()
        let token = operation.observe(\.isFinished, options: [.new]) { _, change in heard.record(change.newValue == true) }
        operation.start()
        token.invalidate()
        #expect(heard.events == [true])
    }
}
