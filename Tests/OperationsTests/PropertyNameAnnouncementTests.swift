// Announcements under the property's name rather than its key ("finished"
// for "isFinished", "executing", "ready"), which Foundation's operation acts
// on as on the keys (probe 46: the operation never left its queue).

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// A hand-built asynchronous operation that announces `executing` and
/// `finished`, and finishes on another thread once `release` opens.
private final class NameAnnouncingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flags` is locked; `release` is a Sendable gate.
    private let flags = LockedValue<(executing: Bool, finished: Bool)>((false, false))
    let release = Gate()

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { flags.withLock { $0.executing } }
    override var isFinished: Bool { flags.withLock { $0.finished } }

    override func start() {
        willChangeValue(forKey: "executing")
        flags.withLock { $0.executing = true }
        didChangeValue(forKey: "executing")
        let release = release
        spawnThread {
            _ = release.wait()
            self.willChangeValue(forKey: "finished")
            self.willChangeValue(forKey: "executing")
            self.flags.withLock { $0 = (false, true) }
            self.didChangeValue(forKey: "executing")
            self.didChangeValue(forKey: "finished")
        }
    }
}

/// A hand-built operation driven by one `state` property, on which
/// `finished` and `executing` depend (`keyPathsForValuesAffectingValue`).
private final class StateKeyOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `state` is atomic.
    private let state = Atomic<Int>(0)   // 0 ready, 1 executing, 2 finished

    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        key == "finished" || key == "executing" ? ["state"] : super.keyPathsForValuesAffectingValue(forKey: key)
    }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { state.load(ordering: .acquiring) == 1 }
    override var isFinished: Bool { state.load(ordering: .acquiring) == 2 }

    private func move(to value: Int) {
        willChangeValue(forKey: "state")
        state.store(value, ordering: .releasing)
        didChangeValue(forKey: "state")
    }

    override func start() {
        move(to: 1)
        spawnThread { self.move(to: 2) }
    }
}

/// An operation whose `isReady` waits for `open()`, announced as `ready`.
private final class ReadyNameOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `opened` is atomic; `ran` is a Sendable gate.
    private let opened = Atomic<Bool>(false)
    let ran = Gate()

    override var isReady: Bool { super.isReady && opened.load(ordering: .acquiring) }

    func open() {
        willChangeValue(forKey: "ready")
        opened.store(true, ordering: .releasing)
        didChangeValue(forKey: "ready")
    }

    override func main() { ran.open() }
}

@Suite("Announcements under property names")
struct PropertyNameAnnouncementTests {
    @Test("An operation that announces \"finished\" leaves its queue; its dependent and completion block run")
    func finishedByName() {
        let queue = makeQueue("names.finished")
        let operation = NameAnnouncingOperation()
        let completed = Gate()
        operation.completionBlock = { completed.open() }
        let dependent = BlockOperation {}
        dependent.addDependency(operation)
        queue.addOperations([operation, dependent], waitUntilFinished: false)
        operation.release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(completed.wait())
        #expect(dependent.isFinished)
        #expect(queue.operationCount == 0)
    }

    @Test("Observers of \"finished\" hear it; the library acts on it")
    func finishedObservers() {
        let operation = NameAnnouncingOperation()
        let heard = Recorder<String>()
        let token = operation.observe(key: "finished", options: [.prior]) { _, change in
            heard.record(change.isPrior ? "will" : "did")
        }
        let queue = makeQueue("names.observers")
        queue.addOperation(operation)
        operation.release.open()
        #expect(operation.waitUntilFinished(timeout: patience))
        #expect(heard.events == ["will", "did"])
        withExtendedLifetime(token) {}
    }

    @Test("A dependent key of \"finished\" (announcing \"state\") finishes the operation")
    func finishedThroughDependentKey() {
        let queue = makeQueue("names.state")
        let operation = StateKeyOperation()
        let dependentRan = Gate()
        let dependent = BlockOperation { dependentRan.open() }
        dependent.addDependency(operation)
        queue.addOperations([operation, dependent], waitUntilFinished: false)
        #expect(dependentRan.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("An isReady announced as \"ready\" is re-read by the queue")
    func readyByName() {
        let queue = makeQueue("names.ready")
        let operation = ReadyNameOperation()
        queue.addOperation(operation)
        operation.open()
        #expect(operation.ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
}

/// A hand-built operation whose `isFinished` depends on a computed property
/// of its own named `finished` (backed by `_finished`), announced by key
/// path: a property named like a lifecycle key stays a key of its own.
private final class ComputedFinishedOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `_finished` is a locked value.
    enum Completion { case pending, done }
    private let _finished = LockedValue(Completion.pending)
    var finished: Completion {
        get { _finished.withLock { $0 } }
        set {
            willChangeValue(for: \.finished)
            _finished.withLock { $0 = newValue }
            didChangeValue(for: \.finished)
        }
    }
    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        key == "isFinished" ? ["finished"] : super.keyPathsForValuesAffectingValue(forKey: key)
    }
    override var isAsynchronous: Bool { true }
    override var isFinished: Bool { finished == .done }
    override func start() { spawnThread { self.finished = .done } }
}

@Suite("A computed property named like a lifecycle key")
struct ComputedPropertyNameTests {
    @Test("a computed `finished` on which isFinished depends, announced by key path, finishes the operation")
    func computedFinished() {
        let queue = makeQueue("names.computed")
        let operation = ComputedFinishedOperation()
        queue.addOperation(operation)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(operation.isFinished)
    }
}
