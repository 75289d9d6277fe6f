// Key-path announcements of computed properties (`willChangeValue(for:
// \.state)` on a `var state: State { get set }` backed by `_state`): Swift
// prints such a key path without a name, so the announcement reached only
// observers of that key path, never the lifecycle keys declared to depend
// on `state`. Found by porting mullvad's Operations framework: its
// `AsyncOperation` announces its computed `state` by key path, and every
// operation stayed in its queue (0 of 24 tests passed).

import Synchronization
import Testing
@testable import Operations

/// The ported shape: a non-final asynchronous operation whose lifecycle
/// getters read one computed `state`, backed by `_state` under a lock,
/// announced by key path, with dependent keys.
private class StateMachineOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `_state` is read and written under `lock`.
    enum State: Int, Comparable {
        case initialized, pending, ready, executing, finished
        static func < (lhs: State, rhs: State) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    private let lock = Mutex<Void>(())
    private var _state = State.initialized
    let ran = Gate()

    var state: State {
        get { lock.withLock { _ in _state } }
        set {
            willChangeValue(for: \.state)
            lock.withLock { _ in _state = newValue }
            didChangeValue(for: \.state)
        }
    }

    override var isReady: Bool { super.isReady && state >= .ready }
    override var isExecuting: Bool { state == .executing }
    override var isFinished: Bool { state == .finished }
    override var isAsynchronous: Bool { true }

    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        switch key {
        case "isReady", "isExecuting", "isFinished": return ["state"]
        default: return super.keyPathsForValuesAffectingValue(forKey: key)
        }
    }

    override func start() {
        state = .executing
        ran.open()
    }

    func finish() { state = .finished }
}

/// A subclass of the ported shape, as frameworks subclass their base.
private final class DownloadOperation: StateMachineOperation, @unchecked Sendable {}

/// A subclass of the ported shape that declares no dependent keys: its
/// `state` announcements (the base class's key path) name nothing.
private final class IndependentStateOperation: StateMachineOperation, @unchecked Sendable {
    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> { [] }
}

/// Two keys of its own that lifecycle keys depend on: `phase` (a `Phase`,
/// backed by `_phase`) and `label` (a `String`). A computed `phase` is named
/// by its type; a computed `doubled` (an `Int`, a type of the standard
/// library, which many properties share) is not.
private final class TwoSourcesOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: written only by the test's thread.
    enum Phase { case idle, armed }
    private var _phase = Phase.idle
    private var _count = 0
    var label = ""
    var phase: Phase {
        get { _phase }
        set { _phase = newValue }
    }
    var count: Int {
        get { _count }
        set { _count = newValue }
    }
    var doubled: Int { _count * 2 }

    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        switch key {
        case "isReady": return ["phase", "label", "count"]
        default: return super.keyPathsForValuesAffectingValue(forKey: key)
        }
    }
}

/// A generic operation whose computed `phase` (backed by `_phase` under a
/// lock) is what `isReady` depends on: each specialization is a class of
/// its own, and `Phase` a type of its own.
private final class GenericPhaseOperation<Payload: Sendable>: Operation, @unchecked Sendable {
    // @unchecked Sendable: `_phase` is read and written under `lock`.
    enum Phase { case waiting, armed }
    private let lock = Mutex<Void>(())
    private var _phase = Phase.waiting
    let payload: Payload
    init(_ payload: Payload) { self.payload = payload }
    var phase: Phase {
        get { lock.withLock { _ in _phase } }
        set {
            willChangeValue(for: \.phase)
            lock.withLock { _ in _phase = newValue }
            didChangeValue(for: \.phase)
        }
    }
    override var isReady: Bool { super.isReady && phase == .armed }
    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        key == "isReady" ? ["phase"] : super.keyPathsForValuesAffectingValue(forKey: key)
    }
}

/// A property wrapper that keeps its value under a lock, as ported
/// operations often keep their state.
@propertyWrapper
private final class LockedState<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `value` is read and written under `lock`.
    private let lock = Mutex<Void>(())
    private var value: Value
    init(wrappedValue: Value) { value = wrappedValue }
    var wrappedValue: Value {
        get { lock.withLock { _ in value } }
        set { lock.withLock { _ in value = newValue } }
    }
}

/// The ported shape with its `state` behind a property wrapper (stored as
/// `_state: LockedState<State>`), announced by key path.
private final class WrappedStateOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `state` is kept by a locking wrapper.
    enum State { case waiting, ready }
    @LockedState private var state = State.waiting

    override var isReady: Bool { super.isReady && state == .ready }
    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        key == "isReady" ? ["state"] : super.keyPathsForValuesAffectingValue(forKey: key)
    }

    func makeReady() {
        willChangeValue(for: \.state)
        state = .ready
        didChangeValue(for: \.state)
    }
}

/// Many threads announce the same unnamed key path for the first time at once.
private final class RacingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `_hits` is atomic and `doubled` is read only.
    private let _hits = Atomic<Int>(0)
    var doubled: Int { _hits.load(ordering: .relaxed) * 2 }
    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        key == "isReady" ? ["hits"] : super.keyPathsForValuesAffectingValue(forKey: key)
    }
}

/// Two computed keys of the same type of its own behind the lifecycle
/// keys: a key path to either cannot be told from the other.
private final class AmbiguousOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: written only by the test's thread.
    enum Flag { case off, on }
    private var _first = Flag.off
    private var _second = Flag.off
    var first: Flag {
        get { _first }
        set { _first = newValue }
    }
    var second: Flag {
        get { _second }
        set { _second = newValue }
    }

    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        key == "isReady" ? ["first", "second"] : super.keyPathsForValuesAffectingValue(forKey: key)
    }
}

/// A computed property and no dependent keys: nothing to name, nothing to report.
private final class PlainComputedOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: written only by the test's thread.
    private var _count = 0
    var count: Int {
        get { _count }
        set { _count = newValue }
    }
}

@Suite("Key-path announcements of computed properties")
struct ComputedKeyPathTests {
    @Test("an operation announcing its computed state by key path becomes ready, starts and finishes in its queue, and its dependent runs")
    func portedStateMachineRuns() {
        let queue = makeQueue("computed-state", width: 2)
        let download = DownloadOperation()
        let after = BlockOperation {}
        after.addDependency(download)
        queue.addOperations([download, after], waitUntilFinished: false)
        #expect(staysFalse { download.ran.opened })
        download.state = .pending
        #expect(staysFalse { download.ran.opened })
        download.state = .ready
        #expect(download.ran.wait())
        #expect(download.isExecuting)
        download.finish()
        #expect(after.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(download.isFinished)
    }

    @Test("observers by string key hear the computed state and the lifecycle keys that depend on it")
    func stringKeyObserversHearIt() {
        let operation = DownloadOperation()
        let heard = Recorder<String>()
        let tokens = ["state", "isReady"].map { key in
            operation.observe(key: key, options: [.prior]) { _, change in
                heard.record("\(change.isPrior ? "will" : "did") \(key)")
            }
        }
        defer { tokens.forEach { $0.invalidate() } }
        operation.state = .pending
        #expect(heard.events == ["will state", "will isReady", "did state", "did isReady"])
    }

    @Test("the key is worked out per class: a subclass without dependent keys announcing the same key path first does not change it for the base class")
    func resolvedPerClass() {
        let independent = IndependentStateOperation()
        let heardIndependent = Recorder<String>()
        let independentToken = independent.observe(key: "isReady") { _, _ in heardIndependent.record("isReady") }
        defer { independentToken.invalidate() }
        independent.state = .pending
        #expect(heardIndependent.events.isEmpty)

        let base = StateMachineOperation()
        let heardBase = Recorder<String>()
        let baseToken = base.observe(key: "isReady") { _, _ in heardBase.record("isReady") }
        defer { baseToken.invalidate() }
        base.state = .pending
        #expect(heardBase.events == ["isReady"])
    }

    @Test("a generic operation's computed key (an enum of its own, stored under _phase) is named, and the queue starts it when it is announced")
    func genericSubclass() {
        let queue = makeQueue("computed-generic")
        let ran = Gate()
        let operation = GenericPhaseOperation("payload")
        operation.completionBlock = { ran.open() }
        queue.addOperation(operation)
        #expect(staysFalse { ran.opened })
        operation.phase = .armed
        #expect(ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a state kept by a property wrapper (stored as _state: LockedState<State>) is named, and the queue starts the operation when it is announced")
    func propertyWrapperState() {
        let queue = makeQueue("computed-wrapped")
        let ran = Gate()
        let operation = WrappedStateOperation()
        operation.completionBlock = { ran.open() }
        queue.addOperation(operation)
        #expect(staysFalse { ran.opened })
        operation.makeReady()
        #expect(ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("eight threads announcing the same unnamed key path for the first time at once: reported exactly once")
    func concurrentFirstAnnouncementsReportOnce() {
        let marker = "computed-key-path-racing"
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        let operation = RacingOperation()
        operation.name = marker
        let start = Gate()
        let done = Latch(count: 8)
        for _ in 0..<8 {
            spawnThread {
                _ = start.wait()
                operation.willChangeValue(for: \.doubled)
                operation.didChangeValue(for: \.doubled)
                done.countDown()
            }
        }
        start.open()
        #expect(done.wait())
        #expect(reports.all.map(\.kind) == [.misuse(.unnamedKeyPathAnnouncement)])
    }

    @Test("with two keys of its own behind the lifecycle keys, the key path's value type picks the one it names")
    func valueTypePicksTheKey() {
        let operation = TwoSourcesOperation()
        let heard = Recorder<String>()
        let token = operation.observe(key: "isReady") { _, _ in heard.record("isReady") }
        defer { token.invalidate() }
        operation.willChangeValue(for: \.phase)
        operation.phase = .armed
        operation.didChangeValue(for: \.phase)
        #expect(heard.events == ["isReady"])
    }

    @Test("a computed key path the library cannot name (an Int, with a key of that type behind isReady) is reported once, never refused, and still reaches its own observers")
    func unnamedIsReportedOnce() throws {
        let marker = "computed-key-path-unnamed"
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        let operation = TwoSourcesOperation()
        operation.name = marker
        let heard = Recorder<Int>()
        let token = operation.observe(\.doubled, options: [.new]) { _, change in heard.record(change.newValue!) }
        defer { token.invalidate() }
        let misuses = Recorder<OperationMisuse>()
        OperationMisuse.withHandler({ misuses.record($0) }) {
            operation.willChangeValue(for: \.doubled)
            operation.count = 2
            operation.didChangeValue(for: \.doubled)
            operation.willChangeValue(for: \.doubled)
            operation.count = 3
            operation.didChangeValue(for: \.doubled)
        }
        #expect(heard.events == [4, 6])
        let report = try #require(reports.all.first)
        #expect(reports.all.count == 1)
        #expect(report.kind == .misuse(.unnamedKeyPathAnnouncement))
        #expect(report.message.contains("\"count\", \"label\", \"phase\""))
        #expect(report.message.contains("willChangeValue(forKey:)"))
        #expect(misuses.events.map(\.code) == [.unnamedKeyPathAnnouncement])
    }

    @Test("two computed keys of the same type cannot be told apart: reported, not guessed")
    func sameTypeIsAmbiguous() {
        let marker = "computed-key-path-ambiguous"
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        let operation = AmbiguousOperation()
        operation.name = marker
        let heard = Recorder<String>()
        let token = operation.observe(key: "isReady") { _, _ in heard.record("isReady") }
        defer { token.invalidate() }
        operation.willChangeValue(for: \.first)
        operation.first = .on
        operation.didChangeValue(for: \.first)
        #expect(heard.events.isEmpty)
        #expect(reports.all.map(\.kind) == [.misuse(.unnamedKeyPathAnnouncement)])
    }

    @Test("a computed property of a class without dependent keys is announced as before, without a report")
    func noDependentKeysNoReport() {
        let marker = "computed-key-path-plain"
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        let operation = PlainComputedOperation()
        operation.name = marker
        let heard = Recorder<Int>()
        let token = operation.observe(\.count, options: [.new]) { _, change in heard.record(change.newValue!) }
        defer { token.invalidate() }
        operation.willChangeValue(for: \.count)
        operation.count = 7
        operation.didChangeValue(for: \.count)
        #expect(heard.events == [7])
        #expect(reports.all.isEmpty)
    }
}
