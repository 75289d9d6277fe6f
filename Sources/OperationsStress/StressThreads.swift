import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A dedicated thread for a long-running engine loop (driver helpers and
/// chaos threads). Dedicated threads, not Dispatch's pool, because these
/// loops block in bounded waits and must not starve the short Dispatch work
/// items the engine also uses (asynchronous finishes, starts by hand).
struct StressThread {
    /// Signalled once `body` has returned.
    let done: DispatchSemaphore

    private final class Box {
        let body: @Sendable () -> Void
        let done: DispatchSemaphore
        init(body: @escaping @Sendable () -> Void, done: DispatchSemaphore) {
            self.body = body
            self.done = done
        }
    }

    /// Starts a detached thread running `body`. Returns nil if the system
    /// refused to create it.
    static func start(_ body: @escaping @Sendable () -> Void) -> StressThread? {
        let done = DispatchSemaphore(value: 0)
        let box = Unmanaged.passRetained(Box(body: body, done: done)).toOpaque()
        #if canImport(Darwin)
        var thread: pthread_t?
        #else
        var thread = pthread_t()
        #endif
        let result = pthread_create(&thread, nil, { argument in
            guard let argument else { return nil }
            let box = Unmanaged<Box>.fromOpaque(argument).takeRetainedValue()
            box.body()
            box.done.signal()
            return nil
        }, box)
        guard result == 0 else {
            Unmanaged<Box>.fromOpaque(box).release()
            return nil
        }
        #if canImport(Darwin)
        if let thread { pthread_detach(thread) }
        #else
        pthread_detach(thread)
        #endif
        return StressThread(done: done)
    }

    /// Waits for the thread's body to return, at most `timeout`.
    func join(timeout: Duration) -> Bool {
        done.wait(timeout: .after(timeout)) == .success
    }
}

extension DispatchTime {
    /// Now plus `duration` (clamped to non-negative nanoseconds).
    static func after(_ duration: Duration) -> DispatchTime {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = max(0, seconds) * 1_000_000_000 + max(0, attoseconds) / 1_000_000_000
        return .now() + .nanoseconds(Int(clamping: nanoseconds))
    }
}

/// Short simulated work: an arithmetic loop the optimiser cannot remove.
/// With `isCancelled`, polls it every 16 iterations and stops early.
@inline(never)
func simulateWork(_ iterations: Int, seed: Int, isCancelled: (() -> Bool)? = nil) -> UInt64 {
    var value = UInt64(truncatingIfNeeded: seed) | 1
    for iteration in 0..<iterations {
        if let isCancelled, iteration & 15 == 0, isCancelled() { break }
        value = value &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        value ^= value >> 29
    }
    return value
}

/// Keeps a value alive and observable, so that simulated work is not elided.
@inline(never)
func consume(_ value: UInt64) {
    if value == 0x5EED_5EED_5EED_5EED { print("", terminator: "") }
}

/// A value guarded by a pthread mutex.
///
/// The engine uses this instead of `Synchronization.Mutex` because on Linux
/// `Mutex` waits with raw futex calls that ThreadSanitizer does not see, so
/// every access it guards would be reported as a race; pthread mutexes are
/// intercepted by the sanitizer.
final class StressLock<State: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `state` is read and written only inside
    // `withLock`, while `mutex` (a pthread mutex) is held.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var state: State

    init(_ state: State) {
        self.state = state
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the state, the mutex held.
    func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
