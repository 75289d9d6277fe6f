#if Tracing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A value guarded by a pthread mutex.
///
/// Not `Synchronization.Mutex`: on Linux that one waits with raw futex
/// calls, which ThreadSanitizer cannot see, so every access it guards is
/// reported as a race; the core library's locks are pthread mutexes too.
final class Locked<Value>: @unchecked Sendable {
    // @unchecked Sendable: `value` is read and written only while `mutex`
    // is held; the mutex is created in `init` and destroyed in `deinit`.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed with \(status)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, the lock held.
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
#endif
