import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A heap-allocated, address-stable mutex for state that several threads
/// contend for (a queue's scheduling state, the worker pool, the dependency
/// graph).
///
/// On Linux it is an *adaptive* `pthread_mutex_t`: a contended `lock()` spins
/// briefly before sleeping in the kernel, which suits critical sections that
/// last tens of nanoseconds. Swift's `Synchronization.Mutex` was measured at
/// about 70 ns per uncontended lock/unlock pair on the reference machine
/// (it records the owner's thread id for priority inheritance), against
/// about 15 ns for this lock, so the scheduler uses this one.
///
/// The lock is not recursive. Never call user code while holding it.
final class PlatformLock: @unchecked Sendable {
    // @unchecked Sendable: the only stored state is the pthread mutex itself,
    // which is designed to be shared between threads; it is created in
    // `init` and destroyed in `deinit`, when no other reference exists.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        #if os(Linux)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        #endif
        let status = pthread_mutex_init(mutex, &attributes)
        precondition(status == 0, "pthread_mutex_init failed with \(status)")
        pthread_mutexattr_destroy(&attributes)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inline(__always)
    func lock() {
        pthread_mutex_lock(mutex)
    }

    @inline(__always)
    func unlock() {
        pthread_mutex_unlock(mutex)
    }

    /// Runs `body` with the lock held. `body` must not call user code.
    @inline(__always)
    func withLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A one-shot wake-up used by blocking waits, or a mutex and condition for
/// waiters of a condition of their own (`withMutex`, `waitLocked(until:)`).
///
/// A thin wrapper over a pthread mutex and condition variable so that waits
/// can have deadlines without Foundation. Waiters re-check their own
/// condition after every wake-up, so spurious wake-ups are harmless.
final class WaitSignal: @unchecked Sendable {
    // @unchecked Sendable: `signalled` is read and written only while
    // `mutex` is held; the pthread objects are thread-safe by design.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var signalled = false

    init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        #if os(Linux) || os(Android) || os(FreeBSD)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        #endif
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Wakes the waiter (now or, if it has not started waiting yet, as soon
    /// as it does).
    func signal() {
        pthread_mutex_lock(mutex)
        signalled = true
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Runs `body` with the mutex held. For callers that keep state of
    /// their own under this mutex: `body` may wait for a broadcast with
    /// `waitLocked(until:)`, and wake waiters with `broadcastLocked()`.
    func withMutex<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Wakes every thread waiting in `waitLocked(until:)`. The mutex is held
    /// (`withMutex`).
    func broadcastLocked() {
        pthread_cond_broadcast(condition)
    }

    /// Waits until `signal()` has been called, or until `deadline` passes.
    /// Returns `true` when signalled. Consumes the signal.
    @discardableResult
    func wait(deadline: Deadline? = nil) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !signalled {
            if let deadline {
                if deadline.hasPassed() { return false }
                waitLocked(until: deadline)
            } else {
                pthread_cond_wait(condition, mutex)
            }
        }
        signalled = false
        return true
    }

    /// Waits once for a signal or broadcast, until `deadline` at the
    /// latest; it may return earlier, so callers re-check their condition.
    /// The mutex is held (`withMutex`), and released meanwhile.
    func waitLocked(until deadline: Deadline) {
        #if os(Linux) || os(Android) || os(FreeBSD)
        // The condition variable measures CLOCK_MONOTONIC (see init).
        var spec = timespec(
            tv_sec: Int(deadline.nanoseconds / 1_000_000_000),
            tv_nsec: Int(deadline.nanoseconds % 1_000_000_000)
        )
        _ = pthread_cond_timedwait(condition, mutex, &spec)
        #elseif canImport(Darwin)
        // Darwin's condition variables measure wall-clock time; a relative
        // wait keeps the deadline monotonic.
        let remaining = deadline.remaining()
        guard remaining > 0 else { return }
        var spec = timespec(tv_sec: Int(remaining / 1_000_000_000), tv_nsec: Int(remaining % 1_000_000_000))
        _ = pthread_cond_timedwait_relative_np(condition, mutex, &spec)
        #else
        #error("Timed waits need a monotonic condition variable on this platform.")
        #endif
    }
}

/// Monotonic time in nanoseconds.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
}

/// A value guarded by a `PlatformLock`: the library's (and tests')
/// replacement for `Synchronization.Mutex`. `package`: the integration
/// targets of this package use it too; clients do not see it.
///
/// `Mutex` on Linux waits with futex system calls inside the prebuilt,
/// uninstrumented Synchronization library, which ThreadSanitizer cannot see:
/// under contention it reports races that are not there. A pthread mutex is
/// intercepted by ThreadSanitizer, so code that is correct stays quiet.
package final class LockedValue<Value>: @unchecked Sendable {
    // @unchecked Sendable: `value` is read and written only inside
    // `withLock`, while `lock` is held.
    private let lock = PlatformLock()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the value.
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// A lock for critical sections of a few instructions that never block,
/// allocate or call user code, on objects made in large numbers (one per
/// `async` body): one atomic flag stored inline, so creating one costs
/// nothing, unlike `PlatformLock`'s heap-allocated mutex. A contended
/// `lock()` spins, and yields the processor after 64 tries in case the
/// holder was preempted.
struct InlineSpinLock: ~Copyable {
    private let held = Atomic<Bool>(false)

    init() {}

    /// Runs `body` with the lock held. `body` must be short and must not
    /// block, allocate on a path that can wait, or call user code.
    @inline(__always)
    func withLock<R>(_ body: () throws -> R) rethrows -> R {
        var spins = 0
        while !held.compareExchange(expected: false, desired: true, successOrdering: .acquiring, failureOrdering: .relaxed).exchanged {
            spins += 1
            if spins > 64 { sched_yield() }
        }
        defer {
            // See `Operation.withStateLock`: keeps the retains of what
            // `body` copied out above the releasing store.
            atomicMemoryFence(ordering: .acquiringAndReleasing)
            held.store(false, ordering: .releasing)
        }
        return try body()
    }
}
