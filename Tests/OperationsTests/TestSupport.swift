// Shared helpers for the test suite: gates and latches with timeouts, a
// thread-safe event recorder, lifetime tracking with weak references,
// concurrency counters, misuse recording, and a way to run code that might
// deadlock without hanging the test run.

import Dispatch
import Synchronization
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The bound for every wait that should succeed: generous, so that slow
/// sanitizer builds on two cores pass, and finite, so that a bug fails the
/// test instead of hanging the run.
let patience: Duration = .seconds(10)

/// How long a negative check ("this did not happen") watches.
let negativeWindow: Duration = .milliseconds(50)

extension Duration {
    var dispatchTimeout: DispatchTime {
        let (seconds, attoseconds) = components
        let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        return .now() + .nanoseconds(Int(nanoseconds))
    }
}

/// A gate that stays open once opened: every waiter, before or after
/// `open()`, passes. Built on a semaphore that each passing waiter re-signals.
final class Gate: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let isOpen = Atomic<Bool>(false)

    init() {}

    func open() {
        if !isOpen.exchange(true, ordering: .acquiringAndReleasing) { semaphore.signal() }
    }

    var opened: Bool { isOpen.load(ordering: .acquiring) }

    /// Waits until the gate is open, or `timeout` passes. Returns whether it opened.
    @discardableResult
    func wait(timeout: Duration = patience) -> Bool {
        guard semaphore.wait(timeout: timeout.dispatchTimeout) == .success else { return false }
        semaphore.signal()
        return true
    }
}

/// Opens once `countDown()` has been called `count` times.
final class Latch: Sendable {
    private let remaining: Atomic<Int>
    private let gate = Gate()

    init(count: Int) {
        remaining = Atomic(count)
        if count <= 0 { gate.open() }
    }

    func countDown() {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { gate.open() }
    }

    var count: Int { max(0, remaining.load(ordering: .acquiring)) }

    @discardableResult
    func wait(timeout: Duration = patience) -> Bool { gate.wait(timeout: timeout) }
}

/// A thread-safe list of events.
final class Recorder<Event: Sendable>: Sendable {
    private let storage = LockedValue<[Event]>([])

    init() {}

    func record(_ event: Event) {
        storage.withLock { $0.append(event) }
    }

    var events: [Event] { storage.withLock { $0 } }
    var count: Int { storage.withLock { $0.count } }

    func removeAll() { storage.withLock { $0.removeAll() } }
}

extension Recorder where Event: Equatable {
    func index(of event: Event) -> Int? { events.firstIndex(of: event) }
}

/// A thread-safe counter that also tracks the highest value reached: wrap
/// each concurrent section in `enter()` / `leave()`.
final class ConcurrencyTracker: Sendable {
    private let current = Atomic<Int>(0)
    private let highest = Atomic<Int>(0)
    private let total = Atomic<Int>(0)

    init() {}

    func enter() {
        let now = current.add(1, ordering: .acquiringAndReleasing).newValue
        _ = total.add(1, ordering: .relaxed)
        var seen = highest.load(ordering: .relaxed)
        while now > seen {
            let (exchanged, original) = highest.compareExchange(expected: seen, desired: now, ordering: .relaxed)
            if exchanged { break }
            seen = original
        }
    }

    func leave() { _ = current.subtract(1, ordering: .acquiringAndReleasing) }

    var running: Int { current.load(ordering: .acquiring) }
    var maximum: Int { highest.load(ordering: .acquiring) }
    var entered: Int { total.load(ordering: .acquiring) }
}

/// A counter.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    init() {}
    @discardableResult
    func increment() -> Int { value.add(1, ordering: .acquiringAndReleasing).newValue }
    var count: Int { value.load(ordering: .acquiring) }
}

/// A value shared between threads.
final class Box<Value: Sendable>: Sendable {
    private let storage: LockedValue<Value>
    init(_ value: Value) { storage = LockedValue(value) }
    var value: Value {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
}

/// A value guarded by a mutex, usable with `willSet` / `didSet` observers
/// (the setter is nonmutating, the storage is a shared box).
@propertyWrapper
struct Locked<Value: Sendable>: Sendable {
    private let storage: Box<Value>
    init(wrappedValue: Value) { storage = Box(wrappedValue) }
    var wrappedValue: Value {
        get { storage.value }
        nonmutating set { storage.value = newValue }
    }
}

/// An object whose release can be observed.
final class Tracked: Sendable {
    let label: String
    init(_ label: String = "tracked") { self.label = label }
}

/// Weak references to objects that must be released.
final class LifetimeTracker: Sendable {
    // @unchecked Sendable: a weak reference is safe to load from any
    // thread; entries are only read and written under the mutex.
    private struct Entry: @unchecked Sendable {
        weak var object: AnyObject?
        let label: String
    }

    private let entries = LockedValue<[Entry]>([])

    init() {}

    /// Starts tracking `object`; returns it for chaining.
    @discardableResult
    func track<T: AnyObject>(_ object: T, _ label: String? = nil) -> T {
        let entry = Entry(object: object, label: label ?? String(describing: type(of: object)))
        entries.withLock { $0.append(entry) }
        return object
    }

    /// Labels of the tracked objects still alive.
    var alive: [String] {
        entries.withLock { $0.filter { $0.object != nil }.map(\.label) }
    }

    /// Waits (bounded) until every tracked object has been released; returns
    /// the labels of those still alive. Release can lag a little behind the
    /// end of the work (a worker thread drops its last reference after
    /// waking the waiters), hence the polling.
    func waitForRelease(timeout: Duration = patience) -> [String] {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while true {
            let remaining = alive
            if remaining.isEmpty || clock.now >= deadline { return remaining }
            usleep(1_000)
        }
    }
}

/// Polls `condition` until it is true or `timeout` passes. Returns whether
/// it became true. For state that has no event to wait on.
@discardableResult
func waitUntil(timeout: Duration = patience, _ condition: () -> Bool) -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while !condition() {
        if clock.now >= deadline { return false }
        usleep(500)
    }
    return true
}

/// Watches `condition` for a short window and returns true if it stayed
/// false throughout: the bounded form of "this did not happen".
func staysFalse(for window: Duration = negativeWindow, _ condition: () -> Bool) -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + window
    while clock.now < deadline {
        if condition() { return false }
        usleep(500)
    }
    return !condition()
}

/// Runs `body` on a new thread and waits (bounded) for it to return, so
/// that a deadlock in the code under test fails the test instead of hanging
/// the run. Returns whether `body` returned in time. A thread that never
/// returns is leaked; the test has failed by then.
@discardableResult
func completesInTime(timeout: Duration = patience, _ body: @escaping @Sendable () -> Void) -> Bool {
    let done = Gate()
    spawnThread {
        body()
        done.open()
    }
    return done.wait(timeout: timeout)
}

/// Starts a detached POSIX thread running `body` (the counterpart of
/// `NSThread detachNewThreadSelector:` in the documents).
func spawnThread(_ body: @escaping @Sendable () -> Void) {
    final class Payload {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let box = Unmanaged.passRetained(Payload(body)).toOpaque()
    var thread = pthread_t()
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    let status = pthread_create(&thread, &attributes, { argument in
        let payload = Unmanaged<Payload>.fromOpaque(argument!).takeRetainedValue()
        payload.body()
        return nil
    }, box)
    pthread_attr_destroy(&attributes)
    precondition(status == 0, "pthread_create failed: \(status)")
}

/// An identifier for the calling thread.
typealias ThreadID = pthread_t

func currentThreadID() -> ThreadID { pthread_self() }

/// The calling thread's name, as the kernel knows it.
func currentThreadName() -> String {
    guard let file = fopen("/proc/thread-self/comm", "r") else { return "" }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 64)
    guard fgets(&buffer, 64, file) != nil else { return "" }
    let bytes = buffer.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }
    return String(decoding: bytes, as: UTF8.self)
}

/// Collects the misuses reported while `body` runs on this task, refusing
/// each one (the handler returns).
@discardableResult
func recordingMisuse<R>(_ body: () throws -> R) rethrows -> (R, [OperationMisuse]) {
    let log = Recorder<OperationMisuse>()
    let result = try OperationMisuse.withHandler({ log.record($0) }, body)
    return (result, log.events)
}

/// Collects the misuses reported while `body` runs; for bodies returning Void.
func misuses(in body: () throws -> Void) rethrows -> [OperationMisuse] {
    try recordingMisuse(body).1
}

/// A fresh queue with a name, for readable misuse messages.
func makeQueue(_ name: String, width: Int = OperationQueue.defaultMaxConcurrentOperationCount) -> OperationQueue {
    let queue = OperationQueue()
    queue.name = name
    queue.maxConcurrentOperationCount = width
    return queue
}

/// Runs a trivial operation on a fresh queue and a trivial manual start: the
/// check, after a misuse, that unrelated operations and queues still work.
func unrelatedWorkStillRuns(sourceLocation: SourceLocation = #_sourceLocation) {
    let ran = Counter()
    let queue = makeQueue("unrelated")
    let queued = BlockOperation { ran.increment() }
    queue.addOperation(queued)
    #expect(queued.waitUntilFinished(timeout: patience), "an unrelated queued operation did not finish", sourceLocation: sourceLocation)
    let manual = BlockOperation { ran.increment() }
    manual.start()
    #expect(manual.isFinished, sourceLocation: sourceLocation)
    #expect(ran.count == 2, sourceLocation: sourceLocation)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), sourceLocation: sourceLocation)
}

/// Checks the queue's internal bookkeeping (`OperationQueue._checkInvariants()`).
func queueInvariantProblem(_ queue: OperationQueue) -> String? {
    queue._checkInvariants()
}

func expectQueueInvariants(_ queue: OperationQueue, sourceLocation: SourceLocation = #_sourceLocation) {
    let problem = queueInvariantProblem(queue)
    #expect(problem == nil, "queue invariants broken: \(problem ?? "")", sourceLocation: sourceLocation)
}

/// A concurrent operation built by hand, as in the chapter's Listing 2-5:
/// it overrides `start()` and its state getters, announces every change
/// itself, and stays executing until `finish(holdingNextFinishedRead:)`.
///
/// With `holdingNextFinishedRead`, the first read of `isFinished` after
/// the finish was announced (the library's, on the finishing thread) opens
/// `finishedReadEntered` and waits, bounded, for `finishedReadRelease`.
class ManualConcurrentOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flags` is locked; the gates and `armed` are Sendable.
    private let flags = LockedValue<(executing: Bool, finished: Bool)>((false, false))
    private let armed = Atomic<Bool>(false)
    /// Opened once `start()` has announced `isExecuting`.
    let started = Gate()
    let finishedReadEntered = Gate()
    let finishedReadRelease = Gate()

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { flags.withLock { $0.executing } }
    override var isFinished: Bool {
        let value = flags.withLock { $0.finished }
        if armed.exchange(false, ordering: .acquiringAndReleasing) {
            finishedReadEntered.open()
            _ = finishedReadRelease.wait()
        }
        return value
    }

    override func start() {
        willChangeValue(forKey: "isExecuting")
        flags.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
        started.open()
    }

    func finish(holdingNextFinishedRead: Bool = false) {
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        flags.withLock { $0 = (false, true) }
        if holdingNextFinishedRead { armed.store(true, ordering: .releasing) }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}
