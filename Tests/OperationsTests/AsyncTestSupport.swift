import Dispatch
import Synchronization
import Testing
@testable import Operations

/// Thrown when an async test step takes longer than its bound.
struct TimeLimitExceeded: Error, CustomStringConvertible {
    let seconds: Double
    var description: String { "step did not complete within \(seconds) s" }
}

/// Runs `body`, failing with `TimeLimitExceeded` if it takes longer than
/// `seconds`, so that a broken async path fails the test instead of hanging.
///
/// The default bound is generous: on a 2-core machine Swift's cooperative
/// pool has two threads, and synchronous tests that block (on purpose, with
/// bounded waits) run on them, so an async step that takes milliseconds
/// alone has waited 7–16 s for a thread in full-suite runs, and more under
/// the sanitizers (one CI run failed at the former 10 s).
func withTimeLimit<T: Sendable>(
    _ seconds: Double = 60,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw TimeLimitExceeded(seconds: seconds)
        }
        return value
    }
}

/// Suspends until `condition` holds or `seconds` pass, checking every
/// 10 ms; returns whether it held. The `async` counterpart of `waitUntil`:
/// it holds no thread of the cooperative pool while it waits.
func waitUntilAsync(seconds: Double = 10, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return true
}

/// A one-shot gate that sync and async code can wait on.
final class AsyncGate: Sendable {
    private let state = LockedValue<(opened: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))
    private let semaphore = DispatchSemaphore(value: 0)

    func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>]? in
            guard !state.opened else { return nil }
            state.opened = true
            defer { state.waiters = [] }
            return state.waiters
        }
        guard let waiters else { return }
        semaphore.signal()
        for waiter in waiters { waiter.resume() }
    }

    var isOpen: Bool { state.withLock { $0.opened } }

    /// Blocks until opened or `seconds` pass; returns whether it opened.
    func wait(seconds: Double = 10) -> Bool {
        guard semaphore.wait(timeout: .now() + seconds) == .success else { return false }
        semaphore.signal()
        return true
    }

    /// Suspends until opened or `seconds` pass, checking every 10 ms;
    /// returns whether it opened. Unlike `opened()` under `withTimeLimit`,
    /// it ends without being cancelled when the gate never opens.
    func opened(within seconds: Double) async -> Bool {
        await waitUntilAsync(seconds: seconds) { isOpen }
    }

    /// Suspends until opened. Bound it with `withTimeLimit`.
    func opened() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.opened { return true }
                state.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }
}

/// A thread-safe log of strings.
final class EventLog: Sendable {
    private let entries = LockedValue<[String]>([])
    func append(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

/// A counter that also records the highest value it reached.
final class ConcurrencyMeter: Sendable {
    private let state = LockedValue<(current: Int, peak: Int)>((0, 0))
    func enter() { state.withLock { $0.current += 1; $0.peak = max($0.peak, $0.current) } }
    func leave() { state.withLock { $0.current -= 1 } }
    var peak: Int { state.withLock { $0.peak } }
}

/// An object whose lifetime tests track with weak references.
final class Payload: Sendable {
    let value: Int
    init(_ value: Int) { self.value = value }
}
