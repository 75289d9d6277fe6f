// Misuse detected on worker threads (waits that could never end, from
// inside an operation), recorded through the process-wide handler; and
// exit tests proving that the default policy traps with a message naming
// the operation.

import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization
import Testing
@testable import Operations

/// Installs a process-wide handler recording misuses whose message contains
/// `tag`; the caller sets the handler back to nil.
private func installProcessHandler(tag: String) -> Recorder<OperationMisuse> {
    let log = Recorder<OperationMisuse>()
    OperationMisuse.handler = { misuse in
        if misuse.message.contains(tag) { log.record(misuse) }
    }
    return log
}

/// Installs a process-wide handler for the duration of `body`, recording
/// misuses whose message contains `tag` (other suites run in parallel; their
/// misuses are recorded elsewhere or refused too), then restores nil.
private func withProcessHandler(tag: String, _ body: (Recorder<OperationMisuse>) -> Void) {
    let log = Recorder<OperationMisuse>()
    OperationMisuse.handler = { misuse in
        if misuse.message.contains(tag) { log.record(misuse) }
    }
    defer { OperationMisuse.handler = nil }
    body(log)
}

@Suite("Misuse on worker threads", .serialized)
struct WorkerMisuseTests {
    @Test("waiting, inside an operation of a serial queue, for an operation queued behind it")
    func waitForLaterOperationOnSerialQueue() {
        withProcessHandler(tag: "serial-") { log in
            let order = Recorder<String>()
            let queue = makeQueue("serial-waits", width: 1)
            let later = BlockOperation { order.record("later") }
            later.name = "serial-later"
            let waiter = BlockOperation {
                later.waitUntilFinished()
                order.record("waiter continued")
            }
            waiter.name = "serial-waiter"
            queue.addOperations([waiter, later], waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the wait deadlocked the serial queue")
            let reported = log.events
            #expect(reported.map(\.code) == [.waitDeadlock])
            #expect(reported.first?.message.contains("\"serial-later\"") == true)
            #expect(reported.first?.message.contains("\"serial-waiter\"") == true)
            #expect(order.events == ["waiter continued", "later"])
            unrelatedWorkStillRuns()
        }
    }

    @Test("waiting, inside an operation, for an operation that depends on it")
    func waitForDependent() {
        withProcessHandler(tag: "dependent-") { log in
            let order = Recorder<String>()
            let queue = makeQueue("dependent-waits")
            let dependent = BlockOperation { order.record("dependent") }
            dependent.name = "dependent-child"
            let waiter = BlockOperation {
                dependent.waitUntilFinished()
                order.record("waiter continued")
            }
            waiter.name = "dependent-parent"
            dependent.addDependency(waiter)
            queue.addOperations([waiter, dependent], waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the wait deadlocked")
            let reported = log.events
            #expect(reported.map(\.code) == [.waitDeadlock])
            #expect(reported.first?.message.contains("\"dependent-child\"") == true)
            #expect(reported.first?.message.contains("\"dependent-parent\"") == true)
            #expect(order.events == ["waiter continued", "dependent"])
            unrelatedWorkStillRuns()
        }
    }

    @Test("waiting for its own queue (waitUntilAllOperationsAreFinished) from inside an operation")
    func waitForOwnQueue() {
        withProcessHandler(tag: "own-queue") { log in
            let continued = Counter()
            let queue = makeQueue("own-queue")
            let waiter = BlockOperation {
                queue.waitUntilAllOperationsAreFinished()
                continued.increment()
            }
            waiter.name = "own-queue-waiter"
            queue.addOperation(waiter)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the wait deadlocked its own queue")
            let reported = log.events
            #expect(reported.map(\.code) == [.waitDeadlock])
            #expect(reported.first?.message.contains("\"own-queue\"") == true)
            #expect(reported.first?.message.contains("\"own-queue-waiter\"") == true)
            #expect(continued.count == 1)
            unrelatedWorkStillRuns()
        }
    }

    @Test("waiting for its own queue from a completion block waits for the other operations, not for itself")
    func waitForOwnQueueFromCompletion() {
        withProcessHandler(tag: "completion-queue") { log in
            let queue = makeQueue("completion-queue")
            let release = Gate()
            let laterRan = Gate()
            let sawOthersDone = Gate()
            let later = BlockOperation {
                release.wait()
                laterRan.open()
            }
            let op = BlockOperation {}
            op.name = "completion-queue-op"
            op.completionBlock = {
                release.open()
                queue.waitUntilAllOperationsAreFinished()
                if laterRan.opened { sawOthersDone.open() }
            }
            queue.addOperations([op, later], waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the completion block deadlocked its queue")
            #expect(sawOthersDone.wait(timeout: patience), "the wait returned before the other operation finished")
            #expect(log.events.isEmpty)
            unrelatedWorkStillRuns()
        }
    }

    @Test("waits that can end are not misuse: a concurrent queue, another queue, a finished operation")
    func legitimateWaitsAreNotReported() {
        withProcessHandler(tag: "legit-") { log in
            let queue = makeQueue("legit-concurrent")
            let other = makeQueue("legit-other")
            let later = BlockOperation {}
            later.name = "legit-later"
            let elsewhere = BlockOperation {}
            elsewhere.name = "legit-elsewhere"
            let waiter = BlockOperation {
                later.waitUntilFinished()
                other.waitUntilAllOperationsAreFinished()
                elsewhere.waitUntilFinished()
            }
            waiter.name = "legit-waiter"
            queue.addOperation(waiter)
            queue.addOperation(later)
            other.addOperation(elsewhere)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(log.events.isEmpty, "\(log.events.map(\.message))")
        }
    }

    @Test("a wait that another thread ends by widening the serial queue is not a misuse (regression)")
    func waitEndedByWidening() {
        withProcessHandler(tag: "widened-") { log in
            let queue = makeQueue("widened-queue", width: 1)
            queue.isSuspended = true
            let later = BlockOperation {}
            later.name = "widened-later"
            let finishedLater = LockedValue(false)
            let waiter = BlockOperation {
                spawnThread {
                    usleep(50_000)
                    queue.maxConcurrentOperationCount = 2
                }
                later.waitUntilFinished()
                finishedLater.withLock { $0 = later.isFinished }
            }
            waiter.name = "widened-waiter"
            queue.addOperations([waiter, later], waitUntilFinished: false)
            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(log.events.isEmpty, "\(log.events.map(\.message))")
            #expect(finishedLater.withLock { $0 }, "the wait returned before the operation finished")
        }
    }

    @Test("a wait that another thread ends by removing the blocking dependency is not a misuse (regression)")
    func waitEndedByRemovedDependency() {
        withProcessHandler(tag: "unblocked-") { log in
            let queue = makeQueue("unblocked-serial", width: 1)
            let other = makeQueue("unblocked-other")
            let dependent = BlockOperation {}
            dependent.name = "unblocked-dependent"
            let finishedDependent = LockedValue(false)
            let waiter = BlockOperation()
            waiter.name = "unblocked-waiter"
            waiter.addExecutionBlock { [unowned waiter] in
                spawnThread {
                    usleep(50_000)
                    dependent.removeDependency(waiter)
                }
                dependent.waitUntilFinished()
                finishedDependent.withLock { $0 = dependent.isFinished }
            }
            dependent.addDependency(waiter)
            other.addOperation(dependent)
            queue.addOperation(waiter)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(other.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(log.events.isEmpty, "\(log.events.map(\.message))")
            #expect(finishedDependent.withLock { $0 }, "the wait returned before the operation finished")
        }
    }

    @Test("a wait that another thread ends by cancelling the operation queued behind it is not a misuse (regression)")
    func waitEndedByCancellation() {
        withProcessHandler(tag: "cancelled-behind-") { log in
            let queue = makeQueue("cancelled-behind-queue", width: 1)
            queue.isSuspended = true
            let later = BlockOperation {}
            later.name = "cancelled-behind-later"
            let finishedLater = LockedValue(false)
            let waiter = BlockOperation {
                spawnThread {
                    usleep(50_000)
                    later.cancel()
                }
                later.waitUntilFinished()
                finishedLater.withLock { $0 = later.isFinished }
            }
            waiter.name = "cancelled-behind-waiter"
            queue.addOperations([waiter, later], waitUntilFinished: false)
            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(log.events.isEmpty, "\(log.events.map(\.message))")
            #expect(finishedLater.withLock { $0 }, "the wait returned before the operation finished")
        }
    }

    // These two wait with `await`: what they wait for runs on Swift's
    // cooperative pool, which synchronous tests blocking its threads could
    // starve.

    @Test("an async body waiting for room in a queue whose operation waits for that body: reported (regression)")
    func asyncRoomWaitCycleReported() async throws {
        let log = installProcessHandler(tag: "room-cycle")
        defer { OperationMisuse.handler = nil }
        let bodies = makeQueue("room-cycle-bodies")
        let full = makeQueue("room-cycle-full")
        full.setPendingLimit(1)
        let entered = Gate()
        let blocker = BlockOperation {
            // Waits for the body that waits for room this operation holds.
            _ = entered.wait()
            BodyHandle.shared.operation?.waitUntilFinished()
        }
        blocker.name = "room-cycle-blocker"
        addSynchronously(blocker, to: full)
        let body = ResultOperation<Int, Never> { () async -> Int in
            entered.open()
            await full.addOperationWhenRoom(BlockOperation {})
            return 1
        }
        body.name = "room-cycle-body"
        BodyHandle.shared.operation = body
        await bodies.addOperationWhenRoom(body)
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(30)
        while !(body.isFinished && blocker.isFinished), clock.now < deadline {
            try await Task.sleep(for: .milliseconds(2))
        }
        #expect(body.isFinished && blocker.isFinished, "the cycle hung")
        #expect(log.events.map(\.code) == [.waitDeadlock], "\(log.events.map(\.message))")
        BodyHandle.shared.operation = nil
    }

    @Test("an AsyncOperation waiting in its block for itself, finished later by another thread, is not a misuse (regression)")
    func asyncOperationWaitsForItsOwnFinish() {
        withProcessHandler(tag: "self-finishing") { log in
            let queue = makeQueue("self-finishing-queue")
            let returned = Gate()
            let operation = AsyncOperation { operation in
                // The callback that finishes it comes from another thread,
                // later than the wait checks' confirmation delay (1 s).
                spawnThread {
                    usleep(1_500_000)
                    operation.finish()
                }
                operation.waitUntilFinished()
                returned.open()
            }
            operation.name = "self-finishing"
            queue.addOperation(operation)
            #expect(returned.wait(), "the wait did not return")
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(log.events.isEmpty, "\(log.events.map(\.message))")
        }
    }

    @Test("a task created by an async body does not count as running its operation (regression)")
    func spawnedTaskIsNotTheBody() async throws {
        let log = installProcessHandler(tag: "spawned-")
        defer { OperationMisuse.handler = nil }
        let queue = makeQueue("spawned-queue")
        let limited = makeQueue("spawned-limited", width: 1)
        limited.setPendingLimit(1, policy: .reject)
        let hold = Gate()
        let observed = Recorder<String>()
        let done = AsyncGate()
        let operation = ResultOperation<Int, Never> { () async -> Int in
            await Task.yield()
            // Created inside the body, after its first suspension: the task
            // inherits the body's task-local values.
            observed.record("body sees current: \(OperationQueue.current == nil ? "nil" : "its queue")")
            Task {
                await BodyHandle.shared.operation?.finished()
                observed.record("finished: \(BodyHandle.shared.operation?.isFinished == true)")
                observed.record("current: \(OperationQueue.current?.name ?? "nil")")
                addSynchronously(BlockOperation { hold.wait() }, to: limited)
                let extra = BlockOperation {}
                addSynchronously(extra, to: limited)
                observed.record("extra cancelled: \(extra.isCancelled)")
                hold.open()
                done.open()
            }
            return 1
        }
        operation.name = "spawned-body"
        BodyHandle.shared.operation = operation
        await queue.addOperationWhenRoom(operation)
        try await withTimeLimit(90) { await done.opened() }
        #expect(log.events.isEmpty, "\(log.events.map(\.message))")
        #expect(observed.events == [
            "body sees current: its queue",
            "finished: true",
            "current: nil",
            "extra cancelled: true",
        ])
        try await withTimeLimit(90) { await limited.drained() }
        BodyHandle.shared.operation = nil
    }

    @Test("a blocking wait for itself made by an async body after its first suspension is reported (regression)")
    func blockingWaitAfterSuspension() async throws {
        let log = installProcessHandler(tag: "suspended-waiter")
        defer { OperationMisuse.handler = nil }
        let queue = makeQueue("suspended-waiter-queue")
        let operation = ResultOperation<Int, Never> { () async -> Int in
            // A suspension that resumes on Swift's cooperative pool.
            try? await Task.sleep(for: .milliseconds(10))
            waitForOperation(BodyHandle.shared.waiter)
            return 1
        }
        operation.name = "suspended-waiter"
        BodyHandle.shared.waiter = operation
        await queue.addOperationWhenRoom(operation)
        // Polled, not awaited: if the wait hangs, `finished()` would never
        // return, and a time limit cannot cancel a task blocked in it.
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(30)
        while !operation.isFinished, clock.now < deadline {
            try await Task.sleep(for: .milliseconds(2))
        }
        #expect(operation.isFinished, "the wait hung")
        #expect(log.events.map(\.code) == [.waitDeadlock])
        BodyHandle.shared.waiter = nil
    }
}

@Suite("Default misuse policy traps")
struct MisuseExitTests {
    @Test("start() twice traps with a message naming the operation")
    func startTwiceTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let op = BlockOperation {}
            op.name = "exit-start-twice"
            op.start()
            op.start()
        }
        if let result {
            let text = String(decoding: result.standardErrorContent, as: UTF8.self)
            #expect(text.contains("\"exit-start-twice\""), "stderr: \(text)")
            #expect(text.contains("startAfterFinished"))
        }
    }

    @Test("with cycle reporting on, a dependency cycle traps with a message naming the operations")
    func cycleTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            OperationMisuse.reportsDependencyCycles = true
            let a = BlockOperation {}
            a.name = "exit-cycle-A"
            let b = BlockOperation {}
            b.name = "exit-cycle-B"
            a.addDependency(b)
            b.addDependency(a)
        }
        if let result {
            let text = String(decoding: result.standardErrorContent, as: UTF8.self)
            #expect(text.contains("\"exit-cycle-A\"") && text.contains("\"exit-cycle-B\""), "stderr: \(text)")
            #expect(text.contains("dependencyCycle"))
        }
    }

    @Test("a wait deadlock on a worker thread traps with a message naming the operation and queue")
    func workerDeadlockTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = OperationQueue()
            queue.name = "exit-serial"
            queue.maxConcurrentOperationCount = 1
            let later = BlockOperation {}
            later.name = "exit-later"
            let waiter = BlockOperation { later.waitUntilFinished() }
            waiter.name = "exit-waiter"
            queue.addOperations([waiter, later], waitUntilFinished: false)
            // The trap ends the process; if it never comes, give up and
            // exit successfully so that the expectation fails.
            // (A nested synchronous function: blocking waits are unavailable
            // from the exit test's async closure itself.)
            func drain() -> Bool { queue.waitUntilAllOperationsAreFinished(timeout: .seconds(20)) }
            if !drain() { return }
        }
        if let result {
            let text = String(decoding: result.standardErrorContent, as: UTF8.self)
            #expect(text.contains("\"exit-later\"") && text.contains("\"exit-waiter\""), "stderr: \(text)")
            #expect(text.contains("waitDeadlock"))
        }
    }
}

/// Operations that bodies refer to (set before they run).
private final class BodyHandle: @unchecked Sendable {
    // @unchecked Sendable: set by the test before the operation is added,
    // read by its body afterwards (the add orders them).
    static let shared = BodyHandle()
    var operation: Operation?
    var waiter: Operation?
}

/// A synchronous function an `async` body calls: blocking waits are
/// unavailable in `async` code itself.
private func waitForOperation(_ operation: Operation?) {
    operation?.waitUntilFinished()
}

/// The synchronous add (which follows the pending limit's policy), from
/// `async` code, where `addOperation` resolves to the suspending form.
private func addSynchronously(_ operation: Operation, to queue: OperationQueue) {
    queue.addOperation(operation)
}
