// Key-value style observation: the exact notification sequences of the
// article on NSOperation's KVO keys (003), the observation options, token
// lifetime, string keys, queue keys, and observers that call back into the
// library.

import Dispatch
import Synchronization
import Testing
@testable import Operations

private func yesNo(_ value: Bool?) -> String {
    switch value {
    case true?: return "YES"
    case false?: return "NO"
    case nil: return "nil"
    }
}

/// Observes the four lifecycle keys of `op` with `[.old, .new]`, recording
/// `"<name> <key> <old>→<new>"`, as the article logs them.
private func observeLifecycle<Op: Operation>(_ op: Op, into log: Recorder<String>) -> [KeyValueObservation] {
    let name = op.name ?? "op"
    @Sendable func entry(_ key: String, _ change: ObservedChange<Bool>) -> String {
        "\(name) \(key) \(yesNo(change.oldValue))→\(yesNo(change.newValue))"
    }
    return [
        op.observe(\.isReady, options: [.old, .new]) { _, change in log.record(entry("isReady", change)) },
        op.observe(\.isCancelled, options: [.old, .new]) { _, change in log.record(entry("isCancelled", change)) },
        op.observe(\.isExecuting, options: [.old, .new]) { _, change in log.record(entry("isExecuting", change)) },
        op.observe(\.isFinished, options: [.old, .new]) { _, change in log.record(entry("isFinished", change)) },
    ]
}

/// A subclass with a property of its own, announced like the article's
/// custom operations do.
private final class ProgressOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `progress` is written and read on the test's
    // thread only (observers run on the thread that announces).
    var progress = 0

    func advance(to value: Int) {
        willChangeValue(forKey: "progress")
        progress = value
        didChangeValue(forKey: "progress")
    }
}

/// Overrides isExecuting with a constant, like a custom concurrent
/// operation that keeps its own flag.
private final class ConstantStateOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: no stored state.
    override var isExecuting: Bool { false }
}

/// A final class overriding `isExecuting` and announcing its changes.
private final class TogglingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `executing` is only changed from the test's thread.
    private nonisolated(unsafe) var executing = false
    override var isExecuting: Bool { executing }
    func toggle() {
        willChangeValue(forKey: "isExecuting")
        executing.toggle()
        didChangeValue(forKey: "isExecuting")
    }
}

@Suite("Observation")
struct ObservationTests {
    // MARK: The article's sequences

    @Test("start, then cancel: isExecuting NO→YES, main, YES→NO, isFinished NO→YES; cancel adds nothing")
    func startThenCancel() {
        let log = Recorder<String>()
        let op = BlockOperation { log.record("main") }
        op.name = "op"
        #expect(op.isReady && !op.isCancelled && !op.isExecuting && !op.isFinished)
        let tokens = observeLifecycle(op, into: log)
        op.completionBlock = { log.record("completion") }
        op.start()
        op.cancel()
        // The completion block runs asynchronously, as in Foundation: handed
        // to another thread before the isExecuting/isFinished observers are
        // told (the article logs it first), so it may run before, between or
        // after them.
        #expect(waitUntil { log.count == 5 })
        #expect(log.events.filter { $0 != "completion" } == [
            "op isExecuting NO→YES",
            "main",
            "op isExecuting YES→NO",
            "op isFinished NO→YES",
        ])
        #expect(log.events.filter { $0 == "completion" }.count == 1)
        #expect(log.index(of: "completion")! > log.index(of: "main")!)
        withExtendedLifetime(tokens) {}
    }

    @Test("cancel, then start: isCancelled NO→YES, isReady YES→YES, isFinished NO→YES; no main, no isExecuting")
    func cancelThenStart() {
        let log = Recorder<String>()
        let op = BlockOperation { log.record("main") }
        op.name = "op"
        let tokens = observeLifecycle(op, into: log)
        op.completionBlock = { log.record("completion") }
        op.cancel()
        log.record("after cancel")
        op.start()
        #expect(waitUntil { log.count == 5 })
        // The completion block may run before or after the isFinished
        // observers (see `startThenCancel`).
        #expect(log.events.filter { $0 != "completion" } == [
            "op isCancelled NO→YES",
            "op isReady YES→YES",
            "after cancel",
            "op isFinished NO→YES",
        ])
        #expect(log.events.filter { $0 == "completion" }.count == 1)
        #expect(log.index(of: "completion")! > log.index(of: "after cancel")!)
        withExtendedLifetime(tokens) {}
    }

    @Test("cancelling an operation that waits on a dependency: isReady NO→YES")
    func cancelUnreadyOperation() {
        let log = Recorder<String>()
        let dependency = BlockOperation {}
        let op = BlockOperation { log.record("main") }
        op.name = "op"
        op.addDependency(dependency)
        let tokens = observeLifecycle(op, into: log)
        op.cancel()
        #expect(op.isReady)
        op.start()
        #expect(log.events == [
            "op isCancelled NO→YES",
            "op isReady NO→YES",
            "op isFinished NO→YES",
        ])
        withExtendedLifetime(tokens) {}
    }

    @Test("cancelling while executing reports only isCancelled, then the normal finish")
    func cancelWhileExecuting() {
        let log = Recorder<String>()
        let op = BlockOperation()
        op.name = "op"
        op.addExecutionBlock { [unowned op] in
            log.record("main")
            op.cancel()
            log.record("main end")
        }
        let tokens = observeLifecycle(op, into: log)
        op.start()
        #expect(log.events == [
            "op isExecuting NO→YES",
            "main",
            "op isCancelled NO→YES",
            "main end",
            "op isExecuting YES→NO",
            "op isFinished NO→YES",
        ])
        withExtendedLifetime(tokens) {}
    }

    @Test("queue without dependencies: each operation goes executing, main, not executing, finished")
    func queueWithoutDependencies() {
        let log = Recorder<String>()
        let bp1 = BlockOperation { log.record("main bp1") }
        bp1.name = "bp1"
        let bp2 = BlockOperation { log.record("main bp2") }
        bp2.name = "bp2"
        let tokens = observeLifecycle(bp1, into: log) + observeLifecycle(bp2, into: log)
        let queue = makeQueue("q")
        queue.addOperation(bp1)
        queue.addOperation(bp2)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        for name in ["bp1", "bp2"] {
            #expect(log.events.filter { $0.contains(name) } == [
                "\(name) isExecuting NO→YES",
                "main \(name)",
                "\(name) isExecuting YES→NO",
                "\(name) isFinished NO→YES",
            ])
        }
        withExtendedLifetime(tokens) {}
    }

    @Test("queue with a dependency: isReady YES→NO at addDependency, NO→YES before isExecuting NO→YES")
    func queueWithDependency() {
        let log = Recorder<String>()
        let bp1 = BlockOperation { log.record("main bp1") }
        bp1.name = "bp1"
        let bp2 = BlockOperation { log.record("main bp2") }
        bp2.name = "bp2"
        let tokens = observeLifecycle(bp1, into: log) + observeLifecycle(bp2, into: log)
        bp1.addDependency(bp2)
        #expect(log.events == ["bp1 isReady YES→NO"])
        let queue = makeQueue("q")
        queue.addOperation(bp1)
        queue.addOperation(bp2)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let events = log.events
        #expect(events.filter { $0.contains("bp1") } == [
            "bp1 isReady YES→NO",
            "bp1 isReady NO→YES",
            "bp1 isExecuting NO→YES",
            "main bp1",
            "bp1 isExecuting YES→NO",
            "bp1 isFinished NO→YES",
        ])
        #expect(events.filter { $0.contains("bp2") } == [
            "bp2 isExecuting NO→YES",
            "main bp2",
            "bp2 isExecuting YES→NO",
            "bp2 isFinished NO→YES",
        ])
        // As in article 003: bp2's body ends, bp1 becomes ready (bp2 released
        // its dependents), and only then are bp2's isFinished observers told.
        let bp2Main = events.firstIndex(of: "main bp2") ?? .max
        let bp2Finished = events.firstIndex(of: "bp2 isFinished NO→YES") ?? -1
        let bp1Ready = events.firstIndex(of: "bp1 isReady NO→YES") ?? -1
        #expect(bp2Main < bp1Ready)
        #expect(bp1Ready < bp2Finished)
        withExtendedLifetime(tokens) {}
    }

    @Test("serial queue (article 003): operations run one at a time in add order")
    func serialQueueOrder() {
        let log = Recorder<String>()
        let running = ConcurrencyTracker()
        let queue = makeQueue("serial", width: 1)
        let ops = (1...3).map { index in
            BlockOperation {
                running.enter()
                log.record("operation\(index)")
                running.leave()
            }
        }
        ops[1].completionBlock = { log.record("operation2-completionBlock") }
        for op in ops { queue.addOperation(op) }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // The operations run in add order, one at a time. Operation2 has left
        // the queue and freed its slot when its completion block runs, so, as
        // on Darwin (where the article's sample shows the block on another
        // thread), operation3 may start before or while the block runs.
        #expect(log.events.filter { $0.hasPrefix("operation") && !$0.contains("completion") } == ["operation1", "operation2", "operation3"])
        #expect(waitUntil { log.events.contains("operation2-completionBlock") })
        let events = log.events
        #expect((events.firstIndex(of: "operation2") ?? .max) < (events.firstIndex(of: "operation2-completionBlock") ?? -1))
        #expect(running.maximum == 1)
    }

    // MARK: Options

    @Test(".prior delivers a notification before the change, with the old value")
    func priorOption() {
        let log = Recorder<String>()
        let op = BlockOperation {}
        let token = op.observe(\.isFinished, options: [.prior, .old, .new]) { _, change in
            log.record("prior=\(change.isPrior) old=\(yesNo(change.oldValue)) new=\(yesNo(change.newValue))")
        }
        op.start()
        #expect(log.events == [
            "prior=true old=NO new=nil",
            "prior=false old=NO new=YES",
        ])
        withExtendedLifetime(token) {}
    }

    @Test(".initial delivers the current value at once")
    func initialOption() {
        let log = Recorder<String>()
        let op = BlockOperation {}
        let token = op.observe(\.isReady, options: [.initial, .new]) { _, change in
            log.record("new=\(yesNo(change.newValue)) old=\(yesNo(change.oldValue))")
        }
        #expect(log.events == ["new=YES old=nil"])
        op.addDependency(BlockOperation {})
        #expect(log.events == ["new=YES old=nil", "new=NO old=nil"])
        withExtendedLifetime(token) {}
    }

    @Test("without .old or .new, changes carry no values")
    func noValueOptions() {
        let log = Recorder<String>()
        let op = BlockOperation {}
        let token = op.observe(\.isFinished) { _, change in
            log.record("\(change.kind) old=\(yesNo(change.oldValue)) new=\(yesNo(change.newValue))")
        }
        op.start()
        #expect(log.events == ["setting old=nil new=nil"])
        withExtendedLifetime(token) {}
    }

    @Test("invalidate() stops notifications")
    func tokenInvalidation() {
        let calls = Counter()
        let op = BlockOperation {}
        let token = op.observe(\.name, options: [.new]) { _, _ in calls.increment() }
        op.name = "one"
        #expect(calls.count == 1)
        token.invalidate()
        op.name = "two"
        token.invalidate()
        #expect(calls.count == 1)
    }

    @Test("releasing the token stops notifications")
    func tokenRelease() {
        let calls = Counter()
        let op = BlockOperation {}
        var token: KeyValueObservation? = op.observe(\.queuePriority, options: [.new]) { _, _ in calls.increment() }
        op.queuePriority = .high
        #expect(calls.count == 1)
        withExtendedLifetime(token) {}
        token = nil
        op.queuePriority = .low
        #expect(calls.count == 1)
    }

    @Test("the token does not keep the operation alive")
    func tokenDoesNotRetainOperation() {
        let tracker = LifetimeTracker()
        var token: KeyValueObservation?
        do {
            let op = tracker.track(BlockOperation {})
            token = op.observe(\.isFinished) { _, _ in }
            op.start()
        }
        #expect(tracker.waitForRelease().isEmpty)
        token?.invalidate()
    }

    @Test("name, queuePriority, completionBlock and dependencies are reported")
    func otherKeys() {
        let log = Recorder<String>()
        let op = BlockOperation {}
        let dependency = BlockOperation {}
        let tokens = [
            op.observe(\.name, options: [.old, .new]) { _, change in
                log.record("name \(String(describing: change.oldValue ?? nil))→\(String(describing: change.newValue ?? nil))")
            },
            op.observe(\.queuePriority, options: [.old, .new]) { _, change in
                log.record("queuePriority \(change.oldValue.map { "\($0.rawValue)" } ?? "?")→\(change.newValue.map { "\($0.rawValue)" } ?? "?")")
            },
            op.observe(\.completionBlock, options: [.new]) { _, change in
                log.record("completionBlock set=\((change.newValue ?? nil) != nil)")
            },
            op.observe(\.dependencies, options: [.old, .new]) { _, change in
                log.record("dependencies \(change.oldValue?.count ?? -1)→\(change.newValue?.count ?? -1)")
            },
        ]
        op.name = "a"
        op.queuePriority = .veryHigh
        op.completionBlock = {}
        op.addDependency(dependency)
        op.removeDependency(dependency)
        #expect(log.events == [
            "name nil→Optional(\"a\")",
            "queuePriority 0→8",
            "completionBlock set=true",
            "dependencies 0→1",
            "dependencies 1→0",
        ])
        withExtendedLifetime(tokens) {}
    }

    // MARK: Subclass keys

    @Test("string-keyed observation of a subclass's own property announced with will/didChangeValue")
    func stringKeyedSubclassProperty() {
        let log = Recorder<String>()
        let op = ProgressOperation()
        let token = op.observe(key: "progress", options: [.old, .new]) { _, change in
            let old = (change.oldValue ?? nil) as? Int
            let new = (change.newValue ?? nil) as? Int
            log.record("progress \(old.map(String.init) ?? "nil")→\(new.map(String.init) ?? "nil")")
        }
        op.advance(to: 50)
        op.advance(to: 100)
        #expect(log.events == ["progress 0→50", "progress 50→100"])
        withExtendedLifetime(token) {}
    }

    @Test("string-keyed observation of a library key reads the library's value")
    func stringKeyedLibraryKey() {
        let log = Recorder<String>()
        let op = BlockOperation {}
        let token = op.observe(key: "isFinished", options: [.old, .new]) { _, change in
            log.record("\(String(describing: (change.oldValue ?? nil) as? Bool))→\(String(describing: (change.newValue ?? nil) as? Bool))")
        }
        op.start()
        #expect(log.events == ["Optional(false)→Optional(true)"])
        withExtendedLifetime(token) {}
    }

    @Test("key-path observation of a subclass's own property reports announced changes")
    func keyPathSubclassProperty() {
        let log = Recorder<Int>()
        let op = ProgressOperation()
        let token = op.observe(\.progress, options: [.new]) { _, change in
            if let value = change.newValue { log.record(value) }
        }
        op.advance(to: 10)
        op.advance(to: 20)
        #expect(log.events == [10, 20])
        withExtendedLifetime(token) {}
    }

    @Test("key-path observation of an overridden lifecycle property through Operation is a named key: .prior and will-time old values")
    func overriddenLifecyclePropertyKeyPath() {
        let log = Recorder<String>()
        // `ConstantStateOperation` is final: `\ConstantStateOperation.isExecuting`
        // names its override, a key path the library cannot name, so observe
        // through `Operation` (see the next test for the direct form).
        let op: Operation = ConstantStateOperation()
        let token = op.observe(\.isExecuting, options: [.prior, .old, .new]) { _, change in
            log.record("prior=\(change.isPrior) old=\(yesNo(change.oldValue)) new=\(yesNo(change.newValue))")
        }
        // An announcement that does not change the value is still a change
        // of a named key (as isReady YES→YES in the article).
        op.willChangeValue(forKey: "isExecuting")
        op.didChangeValue(forKey: "isExecuting")
        #expect(log.events == ["prior=true old=NO new=nil", "prior=false old=NO new=NO"])
        withExtendedLifetime(token) {}
    }

    @Test("a key path to a final class's override still reports announced changes of its value")
    func finalOverrideKeyPathReportsChanges() {
        let log = Recorder<String>()
        let op = TogglingOperation()
        let token = op.observe(\.isExecuting, options: [.old, .new]) { _, change in
            log.record("old=\(yesNo(change.oldValue)) new=\(yesNo(change.newValue))")
        }
        op.toggle()
        op.toggle()
        #expect(log.events == ["old=NO new=YES", "old=YES new=NO"])
        withExtendedLifetime(token) {}
    }

    @Test("string-keyed observation of an overridden lifecycle property delivers .prior and old values")
    func overriddenLifecyclePropertyStringKey() {
        let log = Recorder<String>()
        let op = ConstantStateOperation()
        let token = op.observe(key: "isExecuting", options: [.prior, .old, .new]) { _, change in
            let old = (change.oldValue ?? nil) as? Bool
            let new = (change.newValue ?? nil) as? Bool
            log.record("prior=\(change.isPrior) old=\(yesNo(old)) new=\(yesNo(new))")
        }
        op.willChangeValue(forKey: "isExecuting")
        op.didChangeValue(forKey: "isExecuting")
        #expect(log.events == ["prior=true old=NO new=nil", "prior=false old=NO new=NO"])
        withExtendedLifetime(token) {}
    }

    // MARK: Observers that call back into the library

    @Test("observers may read the operation and use queues without deadlocking")
    func observersRunOutsideLocks() {
        let log = Recorder<String>()
        let sideQueue = makeQueue("side")
        let sideRan = Latch(count: 3)
        let dependency = BlockOperation {}
        dependency.start()
        let op = BlockOperation {}
        op.name = "observed"
        op.addDependency(dependency)
        let tokens = [
            op.observe(\.isExecuting, options: [.new]) { op, _ in
                log.record("executing deps=\(op.dependencies.count) ready=\(op.isReady) name=\(op.name ?? "")")
                sideQueue.addOperation { sideRan.countDown() }
            },
            op.observe(\.isFinished, options: [.new]) { op, change in
                guard change.newValue == true else { return }
                log.record("finished deps=\(op.dependencies.count) priority=\(op.queuePriority.rawValue) qos=\(op.qualityOfService) completion=\(op.completionBlock != nil) cancelled=\(op.isCancelled)")
                op.name = "renamed"
                _ = op.description
                sideQueue.addOperation { sideRan.countDown() }
            },
        ]
        op.completionBlock = {}
        let queue = makeQueue("observed-queue")
        let finished = completesInTime {
            queue.addOperation(op)
            _ = queue.waitUntilAllOperationsAreFinished(timeout: patience)
        }
        #expect(finished, "an observer calling back into the library deadlocked")
        #expect(sideRan.wait())
        #expect(op.name == "renamed")
        #expect(log.events.count == 3, "\(log.events)")
        withExtendedLifetime(tokens) {}
    }

    @Test("a cancel observer may read the operation and its queue")
    func cancelObserverRunsOutsideLocks() {
        let queue = makeQueue("cancel-observer")
        queue.isSuspended = true
        let op = BlockOperation {}
        let log = Recorder<String>()
        let token = op.observe(\.isCancelled, options: [.new]) { op, _ in
            log.record("ready=\(op.isReady) count=\(queue.operationCount) ops=\(queue.operations.count)")
        }
        queue.addOperation(op)
        #expect(completesInTime { queue.cancelAllOperations() }, "cancel observer deadlocked")
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["ready=true count=1 ops=1"])
        withExtendedLifetime(token) {}
    }

    // MARK: Queue keys

    @Test("queue observation: isSuspended and operationCount")
    func queueObservation() {
        let queue = makeQueue("observed", width: 1)
        let suspended = Recorder<String>()
        let counts = Recorder<Int>()
        let tokens = [
            queue.observe(\.isSuspended, options: [.old, .new]) { _, change in
                suspended.record("\(yesNo(change.oldValue))→\(yesNo(change.newValue))")
            },
            queue.observe(\.operationCount, options: [.new]) { queue, change in
                // Reading the queue from the observer must not deadlock.
                _ = queue.operations
                if let value = change.newValue { counts.record(value) }
            },
        ]
        queue.isSuspended = true
        queue.addOperation {}
        queue.addOperation {}
        #expect(counts.events == [1, 2])
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(suspended.events == ["NO→YES", "YES→NO"])
        #expect(waitUntil { counts.events.last == 0 }, "operationCount changes: \(counts.events)")
        #expect(counts.events == [1, 2, 1, 0])
        withExtendedLifetime(tokens) {}
    }

    @Test("queue observation by key name: operationCount and isSuspended, with old and new values")
    func queueObservationByKey() {
        let queue = makeQueue("observed-by-key", width: 1)
        let log = Recorder<String>()
        let tokens = ["operationCount", "isSuspended"].map { key in
            queue.observe(key: key, options: [.old, .new]) { _, change in
                log.record("\(key) \(String(describing: change.oldValue ?? nil))→\(String(describing: change.newValue ?? nil))")
            }
        }
        queue.isSuspended = true
        queue.addOperation {}
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(waitUntil { log.events.count == 4 }, "\(log.events)")
        #expect(log.events == [
            "isSuspended Optional(false)→Optional(true)",
            "operationCount Optional(0)→Optional(1)",
            "isSuspended Optional(true)→Optional(false)",
            "operationCount Optional(1)→Optional(0)",
        ])
        withExtendedLifetime(tokens) {}
    }

    @Test("a queue subclass announces its own property; observe(key:) reports it with old and new values")
    func queueSubclassAnnouncesItsProperty() {
        final class TaggedQueue: OperationQueue, @unchecked Sendable {
            // @unchecked Sendable: `tag` is a locked box.
            private let storage = LockedValue("first")
            var tag: String {
                get { storage.withLock { $0 } }
                set {
                    willChangeValue(forKey: "tag")
                    storage.withLock { $0 = newValue }
                    didChangeValue(forKey: "tag")
                }
            }
        }
        let queue = TaggedQueue()
        let log = Recorder<String>()
        let token = queue.observe(key: "tag", options: [.old, .new]) { queue, _ in
            log.record(queue.tag)
        }
        queue.tag = "second"
        #expect(log.events == ["second"])
        withExtendedLifetime(token) {}
    }

    @Test("queue observation: maxConcurrentOperationCount and name")
    func queueConfigurationObservation() {
        let queue = makeQueue("before")
        let log = Recorder<String>()
        let tokens = [
            queue.observe(\.maxConcurrentOperationCount, options: [.old, .new]) { _, change in
                log.record("width \(change.oldValue ?? 99)→\(change.newValue ?? 99)")
            },
            queue.observe(\.name, options: [.new]) { _, change in
                log.record("name \((change.newValue ?? nil) ?? "nil")")
            },
        ]
        queue.maxConcurrentOperationCount = 3
        queue.name = "after"
        #expect(log.events == ["width -1→3", "name after"])
        withExtendedLifetime(tokens) {}
    }
}
