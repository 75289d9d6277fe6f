#if Logging || Metrics || Tracing
import Dispatch
import Operations
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The integration tests. The hooks they install (report observers,
/// instruments, context carriers) and the systems they bootstrap are
/// process-wide, so every suite nested here runs one test at a time.
///
/// Run them with `swift test --traits Logging,Metrics,Tracing --filter OperationsIntegrationTests`;
/// without the traits this target compiles to nothing.
@Suite(.serialized)
enum IntegrationTests {}

/// How long any step may take before the test fails instead of hanging.
let patience: Duration = .seconds(10)

/// A name no other test uses, for queues and operations whose metrics,
/// spans and reports a test looks for among the whole process's.
func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(nameCounter.add(1, ordering: .relaxed).newValue)"
}

private let nameCounter = Atomic<Int>(0)

/// Waits (bounded) until every operation has retired. An operation's
/// `finished` event is delivered before it retires, but possibly after its
/// queue's `waitUntilAllOperationsAreFinished` returns: tests that read what
/// the instruments recorded wait for the operations themselves.
func retired(_ operations: [Operation]) -> Bool {
    operations.allSatisfy { $0.waitUntilFinished(timeout: patience) }
}

/// A one-shot gate: sync code waits on it with a bound.
final class Gate: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let isOpen = Atomic<Bool>(false)

    /// Opens the gate (once) and releases every waiter.
    func open() {
        guard !isOpen.exchange(true, ordering: .acquiringAndReleasing) else { return }
        semaphore.signal()
    }

    /// Blocks until the gate opens or `timeout` passes; returns whether it opened.
    func wait(timeout: Duration = patience) -> Bool {
        guard semaphore.wait(timeout: .now() + .nanoseconds(Int(timeout.components.seconds) * 1_000_000_000)) == .success else {
            return false
        }
        semaphore.signal()
        return true
    }
}

/// Counts arrivals; a waiter blocks (with a bound) until a number arrived.
final class Arrivals: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    /// One arrival.
    func arrive() { semaphore.signal() }

    /// Blocks until `count` arrivals or `timeout` passes; returns whether all arrived.
    func wait(for count: Int, timeout: Duration = patience) -> Bool {
        let deadline = DispatchTime.now() + .nanoseconds(Int(timeout.components.seconds) * 1_000_000_000)
        for _ in 0..<count where semaphore.wait(timeout: deadline) != .success { return false }
        return true
    }
}

/// Things collected from any thread, with a bounded wait for one to appear.
final class Collected<Element: Sendable>: Sendable {
    private let items = TestLock<[Element]>([])
    private let added = DispatchSemaphore(value: 0)

    /// Adds one.
    func append(_ item: Element) {
        items.withLock { $0.append(item) }
        added.signal()
    }

    /// Everything collected so far.
    var all: [Element] { items.withLock { $0 } }

    /// The collected items that match `predicate`, once there is at least
    /// one, or none if none came within `timeout`.
    func await(timeout: Duration = patience, where predicate: (Element) -> Bool) -> [Element] {
        let deadline = DispatchTime.now() + .nanoseconds(Int(timeout.components.seconds) * 1_000_000_000)
        while true {
            let found = all.filter(predicate)
            if !found.isEmpty { return found }
            if added.wait(timeout: deadline) != .success { return all.filter(predicate) }
        }
    }
}
/// The tests share values through the core's pthread-based `LockedValue`
/// (ThreadSanitizer understands it, unlike `Synchronization.Mutex` on Linux).
typealias TestLock<Value> = LockedValue<Value>
#endif
