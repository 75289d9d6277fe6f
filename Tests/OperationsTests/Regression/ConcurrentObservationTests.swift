// Old values of changes announced at once on several threads, or nested on
// one thread: each did-change reports the old value its own will-change read,
// as Foundation's KVO does (it keeps pending changes per thread).

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// An operation with a stored property of its own (read by reflection),
/// announced by hand.
private final class CountingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: the tests touch `level` from one thread at a
    // time, handing over through a `Gate`.
    var level = 0
}

/// Records the (old, new) values of `level` that an observer is told.
private func observeLevel(of op: CountingOperation) -> (Recorder<(Int?, Int?)>, KeyValueObservation) {
    let changes = Recorder<(Int?, Int?)>()
    let token = op.observe(key: "level", options: [.old, .new]) { _, change in
        changes.record((change.oldValue as? Int, change.newValue as? Int))
    }
    return (changes, token)
}

@Suite("Observed old values under concurrent and nested changes")
struct ConcurrentObservationTests {
    @Test("operationCount observed with .old while operations finish on several threads: every change carries its old value")
    func queueCountOldValues() {
        let queue = makeQueue("observed-count", width: 4)
        let changes = Recorder<(Int?, Int?)>()
        let token = queue.observe(\.operationCount, options: [.old, .new]) { _, change in
            changes.record((change.oldValue, change.newValue))
        }
        // Adds on two threads while workers finish earlier operations: the
        // will/did pairs of the count interleave across threads.
        let perThread = 1_000
        let otherDone = Gate()
        spawnThread {
            for _ in 0..<perThread { queue.addOperation {} }
            otherDone.open()
        }
        for _ in 0..<perThread { queue.addOperation {} }
        #expect(otherDone.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // The wait can return once the count is 0, before the drain loop that
        // retired the last operation has told observers so: give the last
        // change (bounded) time to arrive before stopping the observation.
        _ = waitUntil { changes.events.count >= 4 * perThread }
        token.invalidate()
        let events = changes.events
        #expect(events.count == 4 * perThread, "one change per add and per finish")
        let missing = events.filter { $0.0 == nil || $0.1 == nil }
        #expect(missing.isEmpty, "\(missing.count) of \(events.count) changes lacked a value")
    }

    @Test("changes of one key nested on one thread report their own old values, innermost first")
    func nestedChanges() {
        let op = CountingOperation()
        let (changes, token) = observeLevel(of: op)
        op.level = 1
        op.willChangeValue(forKey: "level")
        op.level = 2
        op.willChangeValue(forKey: "level")
        op.level = 3
        op.didChangeValue(forKey: "level")
        op.didChangeValue(forKey: "level")
        token.invalidate()
        let events = changes.events
        #expect(events.count == 2)
        #expect(events.first.map { [$0.0, $0.1] } == [2, 3])
        #expect(events.last.map { [$0.0, $0.1] } == [1, 3])
    }

    @Test("a did-change on a thread that announced no will-change reports no old value, and takes no other thread's")
    func didChangeOnAnotherThread() {
        let op = CountingOperation()
        let (changes, token) = observeLevel(of: op)
        op.level = 5
        op.willChangeValue(forKey: "level")     // this thread: pending 5
        op.level = 6
        let done = Gate()
        spawnThread {
            // Another thread finishes a change it never began.
            op.didChangeValue(forKey: "level")
            done.open()
        }
        #expect(done.wait())
        op.didChangeValue(forKey: "level")      // takes this thread's 5
        token.invalidate()
        #expect(changes.events.map { [$0.0, $0.1] } == [[nil, 6], [5, 6]])
    }

    @Test("a thread's will-changes never followed by did-changes evict only that thread's old values")
    func strayWillChangesEvictOnlyTheirOwn() {
        let op = CountingOperation()
        let (changes, token) = observeLevel(of: op)
        op.level = 1
        op.willChangeValue(forKey: "level")     // this thread: pending 1
        let done = Gate()
        spawnThread {
            op.level = 7
            for _ in 0..<100 { op.willChangeValue(forKey: "level") }
            done.open()
        }
        #expect(done.wait())
        op.level = 2
        op.didChangeValue(forKey: "level")
        token.invalidate()
        #expect(changes.events.map { [$0.0, $0.1] } == [[1, 2]])
    }
}

@Suite("An observer registered while the operation finishes (regression: probe 7, finding 2)")
struct ObserverRacesFinishTests {
    /// Thread B registers an `isFinished` observer with `.initial` while
    /// thread A runs the operation. The finishing side decided from a
    /// snapshot taken before the registration that nobody observed it, so
    /// an observer whose initial value was `false` never heard `true` (and a
    /// `stateChanges` stream taken then never ended).
    @Test("an isFinished observer that saw false at registration is always told true")
    func observerRegisteredDuringFinish() {
        var missed = 0
        for iteration in 0..<3_000 {
            let op = BlockOperation {}
            let meeting = Meeting()
            let values = Recorder<Bool>()
            let registered = Gate()
            let tokenBox = LockedValue<KeyValueObservation?>(nil)
            spawnThread {
                meeting.arrive(spinning: iteration % 2 == 0 ? iteration % 64 : 0)
                let token = op.observe(\.isFinished, options: [.initial, .new]) { _, change in
                    if let value = change.newValue { values.record(value) }
                }
                tokenBox.withLock { $0 = token }
                registered.open()
            }
            meeting.arrive(spinning: iteration % 2 == 1 ? iteration % 64 : 0)
            op.start()
            #expect(registered.wait())
            let told = values.events
            if told.first == false, !told.contains(true) { missed += 1 }
            tokenBox.withLock { $0?.invalidate() }
        }
        #expect(missed == 0, "\(missed) observers saw isFinished false at registration and were never told true")
    }

    @Test("a stateChanges stream taken while the operation finishes ends")
    func streamTakenDuringFinish() async {
        for iteration in 0..<1_000 {
            let op = BlockOperation {}
            let meeting = Meeting()
            spawnThread {
                meeting.arrive(spinning: iteration % 2 == 0 ? iteration % 128 : 0)
                op.start()
            }
            meeting.arrive(spinning: iteration % 2 == 1 ? iteration % 128 : 0)
            let stream = op.stateChanges
            do {
                try await withTimeLimit(10) {
                    for await _ in stream {}
                }
            } catch {
                Issue.record("a stateChanges stream taken while the operation finished never ended: \(error)")
                return
            }
        }
    }

    @Test("a stateChanges stream taken while a subclass announces its own finish ends (probe 8)")
    func streamTakenDuringAnnouncedFinish() async throws {
        let op = ManualConcurrentOperation()
        op.start()
        spawnThread { op.finish(holdingNextFinishedRead: true) }
        // The finishing thread is inside the library, between reading who
        // observes and finishing, asking the overridden getter.
        #expect(op.finishedReadEntered.wait())
        let stream = op.stateChanges
        op.finishedReadRelease.open()
        do {
            try await withTimeLimit(10) {
                for await _ in stream {}
            }
        } catch {
            Issue.record("the stream never ended: \(error)")
        }
        try await withTimeLimit(10) { await op.finished() }
    }
}
