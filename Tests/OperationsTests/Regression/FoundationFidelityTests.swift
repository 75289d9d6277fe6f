import Synchronization
// Regression tests for issue 10 ("Foundation fidelity"), in the project's own
// words, against the Advanced-NSOperations-style fixture in
// AdvancedOperationsFixture.swift. Tests that need API the old library lacks
// (dependent keys, the cycle hook, KeyValueObservation) are in
// NewAPIRegressionTests.swift and ObservableCoexistenceTests.swift.

import Dispatch
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - Overridden getters are the truth

@Suite("Issue 10: overridden getters are the truth")
struct OverriddenGettersTests {
    @Test("a dependency whose overridden isFinished already returns true does not hold its dependent back, as in Foundation (probe 21)")
    func dependencyFinishedByItsGetter() {
        final class AlreadyFinished: Operation, @unchecked Sendable {
            override var isAsynchronous: Bool { true }
            override var isFinished: Bool { true }
            override func start() {}
        }
        let done = AlreadyFinished()
        let dependent = BlockOperation {}
        dependent.addDependency(done)
        dependent.addDependency(done)
        #expect(dependent.isReady, "the getter says the dependency finished")
        #expect(dependent.dependencies.count == 1, "added once")
        let queue = makeQueue("finished-by-getter")
        queue.addOperation(dependent)
        #expect(dependent.waitUntilFinished(timeout: patience), "the dependent never ran")
        // Removing it is an ordinary edit.
        dependent.removeDependency(done)
        #expect(dependent.dependencies.isEmpty)
        // An unfinished one with an overridden getter still holds its dependent back.
        let unfinished = DelayOperation(.seconds(3600))
        let waiting = BlockOperation {}
        waiting.addDependency(unfinished)
        #expect(!waiting.isReady)
    }

    @Test("an edge to a dependency whose getter reports finished holds nothing back: no cycle, and diagnostics give the real reason (probe 23)")
    func uncountedEdgeIsNotWaitedFor() {
        /// An operation that reports finished by its getter, and a plain one.
        func pair(_ suffix: String) -> (GetterFinishedOperation, BlockOperation) {
            let finished = GetterFinishedOperation(finished: true)
            finished.name = "uncounted-b" + suffix
            let plain = BlockOperation {}
            plain.name = "uncounted-x" + suffix
            return (finished, plain)
        }
        // Forward: b waits for x; then x is given b, which reports finished.
        let (b, x) = pair("")
        b.addDependency(x)
        let forward = OperationMisuse.withDependencyCycleReporting { misuses { x.addDependency(b) } }
        #expect(forward.isEmpty, "\(forward.map(\.message))")
        #expect(x.dependencies.count == 1 && x.isReady)
        // Reverse: x2 is given b2 first (not counted), then b2 waits for x2.
        let (b2, x2) = pair("2")
        x2.addDependency(b2)
        let reverse = OperationMisuse.withDependencyCycleReporting { misuses { b2.addDependency(x2) } }
        #expect(reverse.isEmpty, "\(reverse.map(\.message))")
        #expect(b2.dependencies.count == 1)
        // A suspended queue holding x2: it waits for the queue, not for b2.
        let queue = makeQueue("uncounted-diagnostics")
        queue.isSuspended = true
        queue.addOperation(x2)
        let text = "\(queue.diagnostics())"
        #expect(!text.contains("uncounted-b2"), "\(text)")
        queue.isSuspended = false
        #expect(x2.waitUntilFinished(timeout: patience))
    }

    @Test("a wait for an operation whose only dependency reports finished by its getter is not reported as a deadlock (probe 23; about 1.5 s)")
    func waitForOperationWithUncountedDependency() async {
        await #expect(processExitsWith: .success) { scenarioWaitForOperationWithUncountedDependency() }
    }

    @Test("issue 10 bullet 1: a DelayOperation's dependents start only after the delay")
    func dependentsOfDelayWait() {
        let delay = DelayOperation(.milliseconds(200))
        let dependentStarted = Box<UInt64?>(nil)
        let dependent = BlockOperation { dependentStarted.value = nowNanoseconds() }
        dependent.addDependency(delay)
        let queue = makeQueue("delay")
        queue.addOperations([delay, dependent], waitUntilFinished: false)
        #expect(dependent.waitUntilFinished(timeout: patience))
        #expect(delay.isFinished && delay.finishCalls.count == 1)
        if let began = delay.executeBegan.value, let started = dependentStarted.value {
            let waited = Double(Int64(started) - Int64(began)) / 1e6
            // asyncAfter never fires early: a dependent that honours the
            // overridden isFinished starts at least 200 ms after execute().
            #expect(waited >= 200, "the dependent started \(waited) ms after the delay began, before the delay's isFinished was true")
        } else {
            Issue.record("the delay did not execute or the dependent did not run")
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("issue 10 bullet 1: operationCount, waitUntilFinished and dependents wait until the overridden isFinished is true")
    func operationCountStaysUntilReallyFinished() {
        let op = GatedOperation()
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        let queue = makeQueue("gated-count")
        let other = makeQueue("gated-dependent")
        queue.addOperation(op)
        other.addOperation(dependent)
        #expect(op.executing.wait())
        #expect(staysFalse { queue.operationCount == 0 }, "operationCount dropped while the operation's isFinished was still false")
        #expect(!op.waitUntilFinished(timeout: .milliseconds(50)), "waitUntilFinished returned while isFinished was false")
        #expect(!dependent.isFinished && !dependent.isExecuting, "the dependent ran before its dependency's isFinished was true")
        #expect(!op.isFinished)
        op.gate.open()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(dependent.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(queue.operationCount == 0)
    }

    @Test("issue 10 bullet 1: mutually exclusive operations never overlap")
    func mutualExclusionHolds() {
        let registry = ExclusivityRegistry()
        let tracker = ConcurrencyTracker()
        let ops = (0..<3).map { _ in GatedOperation() }
        for op in ops {
            op.tracker = tracker
            registry.add(op, category: "exclusive")
        }
        let queue = makeQueue("exclusive")
        queue.addOperations(ops, waitUntilFinished: false)
        #expect(ops[0].executing.wait())
        #expect(staysFalse { ops[1].executing.opened || ops[2].executing.opened }, "a second exclusive operation started while the first was still executing")
        for (index, op) in ops.enumerated() {
            #expect(op.executing.wait(), "exclusive operation \(index) never started")
            op.gate.open()
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(tracker.maximum == 1, "\(tracker.maximum) exclusive operations ran at once")
        #expect(ops.allSatisfy { $0.finishCalls.count == 1 })
    }

    @Test("issue 10 bullet 1: a group finishes when its internal queue has run its children; the outer queue counts it until then")
    func groupFinishesWhenDrained() {
        let children = (0..<3).map { _ in GatedOperation() }
        let group = GroupingOperation(children: children)
        let dependentRan = Gate()
        let dependent = BlockOperation { dependentRan.open() }
        dependent.addDependency(group)
        let queue = makeQueue("group-outer")
        queue.addOperations([group, dependent], waitUntilFinished: false)
        for child in children { #expect(child.executing.wait()) }
        #expect(staysFalse { dependentRan.opened || queue.operationCount < 2 }, "the group's dependent ran, or the group left the queue, while its children were still running")
        #expect(!group.isFinished)
        children[0].gate.open()
        children[1].gate.open()
        #expect(staysFalse { dependentRan.opened }, "the group's dependent ran with a child still running")
        children[2].gate.open()
        #expect(dependentRan.wait())
        #expect(group.isFinished && group.finishCalls.count == 1)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
}

// MARK: - start() is called on every dequeued operation

@Suite("Issue 10: start() is always called, exactly once")
struct StartAlwaysCalledTests {
    @Test("issue 10 bullet 2: a queue calls start() exactly once on every operation it dequeues, cancelled ones included; the cancelled one's own finish() runs and its observers are told")
    func startCalledOnCancelledOperations() {
        let queue = makeQueue("start-always")
        queue.isSuspended = true
        let ops = (0..<3).map { _ in GatedOperation() }
        for op in ops { op.gate.open() }
        let finishedSeen = Recorder<Int>()
        let completions = Counter()
        var tokens: [AnyObject] = []
        for (index, op) in ops.enumerated() {
            tokens.append(op.observe(key: "isFinished", options: [.new]) { _, change in
                if (change.newValue ?? nil) as? Bool == true { finishedSeen.record(index) }
            })
            op.completionBlock = { completions.increment() }
        }
        queue.addOperations(ops, waitUntilFinished: false)
        ops[1].cancel()
        #expect(ops[1].isCancelled)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        for (index, op) in ops.enumerated() {
            #expect(op.startCalls.count == 1, "operation \(index): start() called \(op.startCalls.count) times")
            #expect(op.finishCalls.count == 1, "operation \(index): its own finish() ran \(op.finishCalls.count) times")
            #expect(op.isFinished)
        }
        #expect(ops[1].executeCalls.count == 0, "the cancelled operation executed")
        #expect(ops[0].executeCalls.count == 1 && ops[2].executeCalls.count == 1)
        #expect(Set(finishedSeen.events) == [0, 1, 2], "isFinished observers told: \(finishedSeen.events)")
        #expect(waitUntil { completions.count == 3 })
        withExtendedLifetime(tokens) {}
    }

    @Test("issue 10 bullet 2: a cancelled operation whose unfinished dependency never runs still gets start(), once")
    func startCalledOnCancelledOperationWithUnfinishedDependency() {
        let never = BlockOperation {}
        let op = GatedOperation()
        op.addDependency(never)
        let queue = makeQueue("start-cancelled-dependency")
        queue.addOperation(op)
        op.cancel()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "a cancelled operation waiting on a dependency was never retired")
        #expect(op.startCalls.count == 1)
        #expect(op.finishCalls.count == 1 && op.executeCalls.count == 0)
    }

    @Test("issue 10 bullet 2: at width 1, a cancelled operation that overrides start() waits for the executing one")
    func cancelledOverrideWaitsForSlot() {
        let queue = makeQueue("serial-cancelled", width: 1)
        let running = GatedOperation()
        let cancelled = GatedOperation()
        cancelled.gate.open()
        // Added one after the other: each evaluates its (empty) conditions on
        // another thread, so added together either could become ready first.
        queue.addOperation(running)
        #expect(running.executing.wait())
        queue.addOperation(cancelled)
        cancelled.cancel()
        #expect(staysFalse { cancelled.startCalls.count > 0 }, "the cancelled operation's start() ran while another operation executed on a width-1 queue")
        running.gate.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(cancelled.startCalls.count == 1 && cancelled.finishCalls.count == 1)
    }
}

// MARK: - Dependency cycles follow Foundation

/// a → b → c → a (each depends on the next) in a queue: kept, never run,
/// named by diagnostics; cancelling c breaks it and the others run.
func scenarioCycleKeptAndBrokenByCancel() {
    let log = Recorder<String>()
    let a = BlockOperation { log.record("a") }
    let b = BlockOperation { log.record("b") }
    let c = BlockOperation { log.record("c") }
    a.name = "cycle-a"
    b.name = "cycle-b"
    c.name = "cycle-c"
    a.addDependency(b)
    b.addDependency(c)
    c.addDependency(a)
    #expect(a.dependencies == [b] && b.dependencies == [c] && c.dependencies == [a], "an edge of the cycle was not kept")
    let queue = OperationQueue()
    queue.name = "holds-a-loop"
    queue.addOperations([a, b, c], waitUntilFinished: false)
    #expect(!queue.waitUntilAllOperationsAreFinished(timeout: .milliseconds(100)), "operations on a cycle ran")
    #expect(log.events.isEmpty)
    let report = queue.diagnostics()
    #expect(report.contains("cycle"), "diagnostics do not name the cycle:\n\(report)")
    for name in ["cycle-a", "cycle-b", "cycle-c"] {
        #expect(report.contains("\"\(name)\""), "diagnostics do not name \(name):\n\(report)")
    }
    c.cancel()
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "cancelling a member did not break the cycle")
    #expect(log.events == ["b", "a"])
}

/// An operation made its own dependency: kept, never ready until cancelled.
func scenarioSelfDependencyKept() {
    let ran = Counter()
    let op = BlockOperation { ran.increment() }
    op.addDependency(op)
    #expect(op.dependencies == [op])
    #expect(!op.isReady)
    let queue = OperationQueue()
    queue.addOperation(op)
    #expect(!queue.waitUntilAllOperationsAreFinished(timeout: .milliseconds(100)))
    op.cancel()
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(ran.count == 0 && op.isFinished)
}

/// A blocking wait that cannot end because of a cycle prints the hang
/// report, naming the cycle, after OPERATIONS_WAIT_WARNING_SECONDS. The
/// child captures its own standard error through a pipe.
func scenarioCycleWaitIsReported() {
    setenv("OPERATIONS_WAIT_WARNING_SECONDS", "0.2", 1)
    let a = BlockOperation {}
    let b = BlockOperation {}
    a.name = "reported-a"
    b.name = "reported-b"
    a.addDependency(b)
    b.addDependency(a)
    let queue = OperationQueue()
    queue.name = "reported-queue"
    queue.addOperations([a, b], waitUntilFinished: false)

    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else {
        Issue.record("pipe() failed")
        return
    }
    let savedStandardError = dup(2)
    dup2(fds[1], 2)
    _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)

    let waitReturned = Gate()
    spawnThread {
        a.waitUntilFinished()
        waitReturned.open()
    }
    var captured: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    let clock = ContinuousClock()
    let deadline = clock.now + patience
    while clock.now < deadline {
        let count = read(fds[0], &chunk, chunk.count)
        if count > 0 { captured += chunk[0..<count] }
        let soFar = String(decoding: captured, as: UTF8.self)
        if soFar.contains("cycle"), soFar.contains("\"reported-a\""), soFar.contains("\"reported-b\"") { break }
        usleep(1_000)
    }
    dup2(savedStandardError, 2)
    let text = String(decoding: captured, as: UTF8.self)
    childLog(text)
    #expect(text.contains("cycle") && text.contains("\"reported-a\"") && text.contains("\"reported-b\""),
            "no hang report naming the cycle within \(patience):\n\(text)")
    a.cancel()
    #expect(waitReturned.wait(), "the wait did not end after the cycle was broken")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

@Suite("Issue 10: dependency cycles follow Foundation")
struct FoundationCycleTests {
    @Test("issue 10 bullet 3: a → b → c → a is kept (no trap), never runs, is named by diagnostics, and cancelling c breaks it")
    func cycleKeptAndBroken() async {
        await #expect(processExitsWith: .success) { scenarioCycleKeptAndBrokenByCancel() }
    }

    @Test("issue 10 bullet 3: a self-dependency is kept (no trap) and cancelling breaks it")
    func selfDependencyKept() async {
        await #expect(processExitsWith: .success) { scenarioSelfDependencyKept() }
    }

    @Test("issue 10 bullet 3: a wait that cannot end because of a cycle prints a hang report naming the cycle")
    func cycleWaitReported() async {
        await #expect(processExitsWith: .success) { scenarioCycleWaitIsReported() }
    }
}

// MARK: - Order at finish

@Suite("Issue 10: order at finish")
struct OrderAtFinishTests {
    /// What an observer or completion block saw of the queue and dependents.
    struct Sighting: Sendable, Equatable {
        var countsInQueue: Bool
        var listedInQueue: Bool
        var dependentReady: Bool
    }

    @Test("issue 10 bullet 4: isFinished observers and the completion block run after the operation left its queue and released its dependents; waits do not wait for the completion block, which runs asynchronously (probe 46)")
    func orderAtFinishForBlockOperation() {
        let queue = makeQueue("finish-order")
        let op = BlockOperation {}
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        let inObserver = Box<Sighting?>(nil)
        let inCompletion = Box<Sighting?>(nil)
        let completionDone = Counter()
        @Sendable func look() -> Sighting {
            Sighting(
                countsInQueue: queue.operationCount > 0,
                listedInQueue: queue.operations.contains(op),
                dependentReady: dependent.isReady
            )
        }
        let token = op.observe(\.isFinished, options: [.new]) { _, change in
            if change.newValue == true { inObserver.value = look() }
        }
        op.completionBlock = {
            inCompletion.value = look()
            completionDone.increment()
        }
        queue.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(waitUntil { completionDone.count == 1 })
        let expected = Sighting(countsInQueue: false, listedInQueue: false, dependentReady: true)
        #expect(inObserver.value == expected, "in the isFinished observer")
        #expect(inCompletion.value == expected, "in the completion block")
        withExtendedLifetime(token) {}
    }

    @Test("issue 10 bullet 4: the same order for an operation that announces its own finish")
    func orderAtFinishForAnnouncedFinish() {
        let queue = makeQueue("announced-finish-order")
        let op = GatedOperation()
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        let inObserver = Box<Sighting?>(nil)
        let inCompletion = Box<Sighting?>(nil)
        let token = op.observe(key: "isFinished", options: [.new]) { _, change in
            guard (change.newValue ?? nil) as? Bool == true else { return }
            inObserver.value = Sighting(
                countsInQueue: queue.operationCount > 0,
                listedInQueue: queue.operations.contains(op),
                dependentReady: dependent.isReady
            )
        }
        op.completionBlock = {
            inCompletion.value = Sighting(
                countsInQueue: queue.operationCount > 0,
                listedInQueue: queue.operations.contains(op),
                dependentReady: dependent.isReady
            )
        }
        queue.addOperation(op)
        #expect(op.executing.wait())
        op.gate.open()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(waitUntil { inCompletion.value != nil })
        let expected = Sighting(countsInQueue: false, listedInQueue: false, dependentReady: true)
        #expect(inObserver.value == expected, "in the isFinished observer")
        #expect(inCompletion.value == expected, "in the completion block")
        withExtendedLifetime(token) {}
    }
}

@Suite("The completion block is under way before the isExecuting/isFinished observers are told (document 003's logs; probe 52)")
struct CompletionBeforeObserversTests {
    enum Finish: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case handStart, cancelledHandStart, serialQueue, defaultQueue, announcedFinish
        var testDescription: String { rawValue }
    }

    /// In each of the article's logs ("All task finished.", "bp2 complete")
    /// the completion block prints before the `isExecuting` 1→0 and
    /// `isFinished` 0→1 notifications. So an observer of either may wait for
    /// the block: before, it waited until its bound (the block was handed
    /// on only after the observers returned).
    @Test("an isExecuting or isFinished observer that waits for the completion block sees it run", arguments: Finish.allCases)
    func observerSeesCompletionBlock(_ finish: Finish) {
        let completionRan = Gate()
        let seen = Recorder<String>()
        let op: Operation = finish == .announcedFinish ? GatedOperation() : BlockOperation {}
        op.completionBlock = { completionRan.open() }
        // The first announcement that reads finished: a class that announces
        // its own finish may be announced finished again, by the base
        // `start()` after `main()` returns (seen once under ThreadSanitizer).
        let finishedSeen = Counter()
        let finishedToken = op.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true, finishedSeen.increment() == 1 else { return }
            seen.record(completionRan.wait() ? "isFinished: completion ran" : "isFinished: completion did not run")
        }
        // A class that announces its own finish is finished when it
        // announces `isFinished`, after its `isExecuting` announcement: as on
        // Darwin, only the `isFinished` observers come after the block.
        let watchesExecuting = finish != .announcedFinish && finish != .cancelledHandStart
        let executingToken = !watchesExecuting ? nil : op.observe(\.isExecuting, options: [.old, .new]) { _, change in
            guard change.oldValue == true, change.newValue == false else { return }
            seen.record(completionRan.wait() ? "isExecuting: completion ran" : "isExecuting: completion did not run")
        }
        switch finish {
        case .handStart:
            op.start()
        case .cancelledHandStart:
            op.cancel()
            op.start()
        case .serialQueue, .defaultQueue:
            let queue = makeQueue("completion-first", width: finish == .serialQueue ? 1 : OperationQueue.defaultMaxConcurrentOperationCount)
            queue.addOperation(op)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        case .announcedFinish:
            let queue = makeQueue("completion-first-announced")
            let gated = op as! GatedOperation
            queue.addOperation(gated)
            #expect(gated.executing.wait())
            gated.gate.open()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(waitUntil { seen.events.contains { $0.hasPrefix("isFinished") } })
        let expected = watchesExecuting
            ? ["isExecuting: completion ran", "isFinished: completion ran"]
            : ["isFinished: completion ran"]
        #expect(seen.events == expected)
        withExtendedLifetime((finishedToken, executingToken)) {}
    }

    /// The block may now run before the operation retires (its observers
    /// are still being told): a wait for its own operation from inside it
    /// returns at once, as documented, rather than wait for the retirement,
    /// which here waits for the block.
    @Test("the completion block's own waitUntilFinished returns at once while an isFinished observer waits for the block")
    func completionBlockWaitsForItsOperation() {
        let completionReturned = Gate()
        let waited = Box<Bool?>(nil)
        let observerSaw = Box<Bool?>(nil)
        let op = BlockOperation {}
        op.completionBlock = { [unowned op] in
            waited.value = op.waitUntilFinished(timeout: patience)
            completionReturned.open()
        }
        let token = op.observe(\.isFinished, options: [.new]) { _, change in
            if change.newValue == true { observerSaw.value = completionReturned.wait() }
        }
        let queue = makeQueue("completion-waits-for-itself")
        queue.addOperation(op)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 3))
        #expect(waited.value == true, "waitUntilFinished from the completion block")
        #expect(observerSaw.value == true, "the observer saw the completion block return")
        withExtendedLifetime(token) {}
    }
}

@Suite("isReady is announced once when the last two dependencies finish together (regression: probe G12)")
struct ConcurrentLastDependenciesTests {
    /// Each finishing dependency predicted, before taking the dependent's
    /// lock, whether its finish would make the dependent ready (the count
    /// it saw was 1). Two dependencies finishing at once both saw 2, both
    /// predicted no change, and the dependent became ready unannounced.
    @Test("an isReady observer of a fan-in is told exactly once, whatever the finishing order")
    func lastTwoDependenciesFinishTogether() {
        var misses = 0
        for _ in 0..<400 {
            let queue = OperationQueue()
            let sink = BlockOperation {}
            let meeting = Meeting()
            let dependencies = (0..<2).map { _ in
                // Both bodies end at the same moment (bounded spin).
                BlockOperation { meeting.arrive() }
            }
            for dependency in dependencies { sink.addDependency(dependency) }
            let toldTrue = Atomic<Int>(0)
            let toldChange = Atomic<Int>(0)
            let token = sink.observe(\.isReady, options: [.old, .new]) { _, change in
                if change.newValue == true { toldTrue.add(1, ordering: .relaxed) }
                // As Foundation tells it: from not ready to ready (the will-change
                // reached the observer before the count reached zero).
                if change.oldValue == false, change.newValue == true { toldChange.add(1, ordering: .relaxed) }
            }
            queue.addOperations(dependencies + [sink], waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            if toldTrue.load(ordering: .relaxed) != 1 || toldChange.load(ordering: .relaxed) != 1 { misses += 1 }
            token.invalidate()
        }
        #expect(misses == 0, "\(misses) of 400 fan-ins were not announced as a change to ready exactly once")
    }
}

@Suite("isReady is announced when an edit races a dependency's finish (regression: probe D1)")
struct EditRacesFinishTests {
    enum Edit: String, CaseIterable, Sendable { case remove, add }

    /// The operation depends on `running` (finishing now) and, for
    /// `remove`, on `idle`, which another thread removes at the same moment;
    /// for `add`, another thread adds `idle` at the same moment. Each side
    /// predicted the change from a snapshot taken before the lock, and
    /// neither announced it.
    @Test("an isReady observer is told of every change when an edit races the last dependency's finish", arguments: Edit.allCases)
    func editRacesFinish(edit: Edit) {
        var misses = 0
        for _ in 0..<400 {
            let queue = OperationQueue()
            let meeting = Meeting()
            let running = BlockOperation { meeting.arrive() }
            let idle = BlockOperation {}
            let dependent = BlockOperation {}
            dependent.addDependency(running)
            if edit == .remove { dependent.addDependency(idle) }
            let told = LockedValue<[Bool]>([])
            let token = dependent.observe(\.isReady, options: [.new]) { _, change in
                if let value = change.newValue { told.withLock { $0.append(value) } }
            }
            let editor = DispatchQueue.global()
            let edited = DispatchSemaphore(value: 0)
            editor.async {
                meeting.arrive()
                if edit == .remove { dependent.removeDependency(idle) } else { dependent.addDependency(idle) }
                edited.signal()
            }
            queue.addOperation(running)
            #expect(edited.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            // Whatever the order, every change was told (remove: it became
            // ready, so `true` was told; add: if it became ready before the
            // edit made it unready again, both were told). The order in
            // which two threads' handlers record is not the order of the
            // changes, so only which values were told is checked.
            let values = told.withLock { $0 }
            let finalReady = dependent.isReady
            #expect(finalReady == (edit == .remove))
            if edit == .remove ? !values.contains(true) : values.contains(true) && !values.contains(false) { misses += 1 }
            token.invalidate()
        }
        #expect(misses == 0, "\(misses) of 400 races changed isReady without telling its observer")
    }
}

/// A concurrent operation built by hand whose overridden `isFinished` is the
/// truth; `reportFinishedSilently()` makes the getter return true without an
/// announcement, and `start()` announces the finish.
final class GetterFinishedOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `finished` is atomic.
    private let finished: Atomic<Bool>

    init(finished: Bool) {
        self.finished = Atomic(finished)
        super.init()
    }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { false }
    override var isFinished: Bool { finished.load(ordering: .acquiring) }

    func reportFinishedSilently() { finished.store(true, ordering: .releasing) }

    override func start() {
        willChangeValue(forKey: "isFinished")
        finished.store(true, ordering: .releasing)
        didChangeValue(forKey: "isFinished")
    }
}

/// An operation of a serial queue waits for `x`, which is in no queue and
/// which another thread starts 1.5 s later (longer than the deadlock check
/// takes to confirm a suspicion). `x`'s only dependency reports finished by
/// its getter, but is queued behind the waiting operation: the wait is not
/// a deadlock, and must not be reported as one (the default handler traps).
func scenarioWaitForOperationWithUncountedDependency() {
    let queue = makeQueue("uncounted-wait", width: 1)
    let dependency = GetterFinishedOperation(finished: false)
    dependency.name = "uncounted-dependency"
    let x = BlockOperation {}
    x.name = "uncounted-x"
    let waitReturned = Gate()
    let waiting = BlockOperation {
        x.waitUntilFinished()
        waitReturned.open()
    }
    queue.addOperation(waiting)
    queue.addOperation(dependency)
    dependency.reportFinishedSilently()
    x.addDependency(dependency)
    #expect(x.isReady)
    spawnThread {
        // The scenario itself: a wait that lasts, then ends.
        _ = Gate().wait(timeout: .milliseconds(1500))
        x.start()
    }
    #expect(waitReturned.wait(timeout: patience), "the wait did not return")
    #expect(x.isFinished)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}
