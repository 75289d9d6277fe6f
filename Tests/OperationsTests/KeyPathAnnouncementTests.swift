// The key-path forms of willChangeValue / didChangeValue (Foundation's
// `willChangeValue(for: \.isReady)`), found missing by porting OpenCombine's
// OperationQueue scheduler: its final operation class overrides `isReady`
// and announces it by key path.

import Synchronization
import Testing
@testable import Operations

/// OpenCombine's shape: a final class that overrides `isReady` and
/// announces the change by key path.
private final class KeyPathReadyOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `allowed` is atomic; `ran` is a Sendable gate.
    private let allowed = Atomic<Bool>(false)
    let ran = Gate()

    override var isReady: Bool { super.isReady && allowed.load(ordering: .acquiring) }

    func allow() {
        willChangeValue(for: \.isReady)
        allowed.store(true, ordering: .releasing)
        didChangeValue(for: \.isReady)
    }

    override func main() { ran.open() }
}

/// A hand-built asynchronous operation that announces its flags by key path.
private final class KeyPathAsyncOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: the flags are atomics.
    private let executing = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { executing.load(ordering: .acquiring) }
    override var isFinished: Bool { finished.load(ordering: .acquiring) }

    override func start() {
        willChangeValue(for: \.isExecuting)
        executing.store(true, ordering: .releasing)
        didChangeValue(for: \.isExecuting)
    }

    func finish() {
        willChangeValue(for: \.isExecuting)
        willChangeValue(for: \.isFinished)
        executing.store(false, ordering: .releasing)
        finished.store(true, ordering: .releasing)
        didChangeValue(for: \.isExecuting)
        didChangeValue(for: \.isFinished)
    }
}

/// An operation with its own properties, announced by key path, and a
/// record of the string keys its overridden announcement methods receive.
private final class OwnPropertyOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `state` and `inner` are written only by the test's
    // thread, before the observers read them on the same thread.
    var state = 0
    var inner = Inner()
    var doubled: Int { state * 2 }
    let keys = Recorder<String>()

    struct Inner { var level = 0 }

    override func willChangeValue(forKey key: String) {
        keys.record("will \(key)")
        super.willChangeValue(forKey: key)
    }

    override func didChangeValue(forKey key: String) {
        keys.record("did \(key)")
        super.didChangeValue(forKey: key)
    }

    func setState(_ value: Int) {
        willChangeValue(for: \.state)
        state = value
        didChangeValue(for: \.state)
    }
}

private final class OwnPropertyQueue: OperationQueue, @unchecked Sendable {
    // @unchecked Sendable: `label` is written only by the test's thread.
    var label = "a"

    func relabel(_ value: String) {
        willChangeValue(for: \.label)
        label = value
        didChangeValue(for: \.label)
    }
}

@Suite("Key-path announcements")
struct KeyPathAnnouncementTests {
    @Test("a final class that overrides isReady and announces it with didChangeValue(for: \\.isReady) runs in its queue")
    func readinessByKeyPath() {
        let queue = makeQueue("key-path-ready")
        let op = KeyPathReadyOperation()
        queue.addOperation(op)
        #expect(staysFalse { op.ran.opened })
        op.allow()
        #expect(op.ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(op.isFinished)
    }

    @Test("a hand-built asynchronous operation that announces isFinished by key path finishes, and its observers hear the changes")
    func asynchronousByKeyPath() {
        let queue = makeQueue("key-path-async")
        let op = KeyPathAsyncOperation()
        let changes = Recorder<String>()
        let started = Gate()
        let tokens = [
            op.observe(key: "isExecuting", options: [.new]) { _, change in
                changes.record("isExecuting \(String(describing: change.newValue!!))")
                if change.newValue as? Bool == true { started.open() }
            },
            op.observe(key: "isFinished", options: [.new]) { _, change in
                changes.record("isFinished \(String(describing: change.newValue!!))")
            },
        ]
        defer { tokens.forEach { $0.invalidate() } }
        queue.addOperation(op)
        #expect(started.wait())
        #expect(!op.isFinished)
        op.finish()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(changes.events == ["isExecuting true", "isExecuting false", "isFinished true"])
    }

    @Test("a subclass's stored property is announced under its name: string-key observers and overridden announcement methods see it")
    func ownStoredProperty() {
        let op = OwnPropertyOperation()
        let heard = Recorder<String>()
        let token = op.observe(key: "state", options: [.old, .new]) { _, change in
            heard.record("\(String(describing: change.oldValue!!)) → \(String(describing: change.newValue!!))")
        }
        defer { token.invalidate() }
        op.setState(3)
        #expect(heard.events == ["0 → 3"])
        #expect(op.keys.events == ["will state", "did state"])
        op.keys.removeAll()
        op.willChangeValue(for: \.inner.level)
        op.inner.level = 2
        op.didChangeValue(for: \.inner.level)
        #expect(op.keys.events == ["will inner.level", "did inner.level"])
    }

    @Test("the library's own properties are announced under their Foundation names, through the overridable string-keyed methods")
    func libraryPropertiesByKeyPath() {
        let op = OwnPropertyOperation()
        op.willChangeValue(for: \.isReady)
        op.didChangeValue(for: \.isReady)
        op.willChangeValue(for: \.queuePriority)
        op.didChangeValue(for: \.queuePriority)
        #expect(op.keys.events == ["will isReady", "did isReady", "will queuePriority", "did queuePriority"])
    }

    @Test("a subclass's computed property has no name, but observers of its key path still re-read it")
    func ownComputedProperty() {
        let op = OwnPropertyOperation()
        let heard = Recorder<Int>()
        let token = op.observe(\.doubled, options: [.new]) { _, change in heard.record(change.newValue!) }
        defer { token.invalidate() }
        op.willChangeValue(for: \.doubled)
        op.state = 5
        op.didChangeValue(for: \.doubled)
        #expect(heard.events == [10])
    }

    @Test("a queue subclass announces its own property by key path, and the queue's by their names")
    func queueProperties() {
        let queue = OwnPropertyQueue()
        let heard = Recorder<String>()
        let token = queue.observe(key: "label", options: [.new]) { _, change in
            heard.record(String(describing: change.newValue!!))
        }
        defer { token.invalidate() }
        queue.relabel("b")
        #expect(heard.events == ["b"])
        let counts = Recorder<String>()
        let countToken = queue.observe(key: "operationCount", options: [.prior]) { _, change in
            counts.record(change.isPrior ? "will" : "did")
        }
        defer { countToken.invalidate() }
        queue.willChangeValue(for: \.operationCount)
        queue.didChangeValue(for: \.operationCount)
        #expect(counts.events == ["will", "did"])
    }
}
