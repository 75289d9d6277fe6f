// Helpers for the regression tests of issues 9 and 10: most scenarios run
// inside exit tests (a child process), so that a crash or a deadlock fails
// one test instead of the whole run, and so that a process-wide misuse
// handler, a grown worker pool or a leaked blocked thread stays in the child.
//
// Inside a child, `#expect` and `Issue.record` work as usual: their issues
// are reported by the parent test.

import Dispatch
import Synchronization
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Installs a process-wide misuse handler that records every misuse and
/// refuses the offending call. Only call it inside an exit test's child
/// process: other suites of the parent would see the handler too.
func installChildMisuseRecorder() -> Recorder<OperationMisuse> {
    let log = Recorder<OperationMisuse>()
    OperationMisuse.handler = { misuse in log.record(misuse) }
    return log
}

/// The codes of the recorded misuses, with their messages for failure output.
func describeMisuses(_ misuses: [OperationMisuse]) -> String {
    misuses.isEmpty ? "no misuse" : misuses.map(\.message).joined(separator: "\n")
}

/// Runs `body` on a new thread and waits for it at most `timeout`; records
/// an issue naming `what` if it did not return (a hang). Meant for exit-test
/// children, where a thread left blocked dies with the process.
@discardableResult
func expectReturns(
    _ what: String,
    within timeout: Duration = patience,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () -> Void
) -> Bool {
    let returned = completesInTime(timeout: timeout, body)
    #expect(returned, "\(what) did not return within \(timeout): it hangs", sourceLocation: sourceLocation)
    return returned
}

/// Writes a line to standard error unbuffered (the child's output is
/// observed by some parents).
func childLog(_ line: String) {
    let text = line + "\n"
    _ = text.withCString { write(2, $0, strlen($0)) }
}

/// The process's resident set size in bytes, from /proc/self/statm.
func residentBytes() -> Int {
    guard let file = fopen("/proc/self/statm", "r") else { return 0 }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 128)
    guard fgets(&buffer, 128, file) != nil else { return 0 }
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// Monotonic time in nanoseconds, for the few tests that check a lower bound
/// on elapsed time (a deadline that cannot fire early) or a very generous
/// upper bound.
func nowNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

/// A weak reference that can be shared between threads.
final class WeakReference<Object: AnyObject>: @unchecked Sendable {
    // @unchecked Sendable: a weak reference is safe to load from any thread;
    // it is written once, before the box is shared.
    weak var object: Object?
    init(_ object: Object?) { self.object = object }
    var isReleased: Bool { object == nil }
}

/// Resumes a suspended task exactly once, from whichever side comes first
/// (the code under test, or the test cleaning up after a failure).
final class OneShotResume: @unchecked Sendable {
    // @unchecked Sendable: both fields are guarded by `lock`.
    private let lock = RegressionLock()
    private var continuation: CheckedContinuation<Void, Never>?
    private var resumed = false

    init() {}

    /// Suspends until `resume()` is called (at once if it already was).
    func suspend() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = lock.withLock { () -> Bool in
                if resumed { return true }
                self.continuation = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    func resume() {
        let pending = lock.withLock { () -> CheckedContinuation<Void, Never>? in
            resumed = true
            defer { continuation = nil }
            return continuation
        }
        pending?.resume()
    }
}

/// A plain mutex, so that the fixtures do not depend on the library's
/// internal lock types (which the rewrite may change).
final class RegressionLock: @unchecked Sendable {
    // @unchecked Sendable: the mutex is only used through pthread calls.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// Polls `condition` from an async test until it is true or `timeout`
/// passes, without blocking a thread of the cooperative pool and without
/// cancelling anything (unlike `withTimeLimit`, whose cancellation would
/// reach an awaited operation). Returns whether it became true.
func eventually(timeout: Duration = patience, _ condition: @Sendable () -> Bool) async -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while !condition() {
        if clock.now >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}

/// Whether the process runs under AddressSanitizer or ThreadSanitizer,
/// whose allocators keep freed memory in quarantine: resident-memory
/// measurements mean nothing there.
let runningUnderSanitizer: Bool = {
    dlsym(nil, "__asan_init") != nil || dlsym(nil, "__tsan_init") != nil
}()

/// Two threads meet, then one of them waits `delay` spins: sweeping the
/// delay over the iterations sweeps the race window.
final class Meeting: Sendable {
    private let arrived = Atomic<Int>(0)

    func arrive(spinning delay: Int = 0) {
        arrived.add(1, ordering: .acquiringAndReleasing)
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(1)
        while arrived.load(ordering: .acquiring) < 2, clock.now < deadline {}
        var sink = 0
        for index in 0..<delay { sink &+= index }
        withExtendedLifetime(sink) {}
    }
}
