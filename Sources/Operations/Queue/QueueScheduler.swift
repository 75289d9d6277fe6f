/// Bits of `Operation.queueFlags`, guarded by the owning queue's lock.
enum QueueLinkFlags {
    /// In the queue's add-order list.
    static let linked: UInt8 = 1 << 0
    /// Popped to be started (it holds a slot, unless `bypass`).
    static let started: UInt8 = 1 << 1
    /// Started from the cancelled lane, without taking a width slot.
    static let bypass: UInt8 = 1 << 2
}

/// The scheduling state of one `OperationQueue`. Guarded by the queue's lock.
///
/// - An add-order list of the unfinished operations, linked through the
///   operations themselves (`queueNext` / `queuePrevious`); the list holds
///   the strong references that keep queued operations alive.
/// - Six ready lanes, also intrusive: lane 0 holds cancelled operations,
///   which are retired first and without taking a slot of
///   `maxConcurrentOperationCount`; lanes 1 ... 5 hold ready operations by
///   priority, very high first, first in first out within a lane.
/// - Counters for `maxConcurrentOperationCount` and the drain loops.
///
/// An operation enters a lane only when it is ready, so picking the next
/// operation never scans waiting ones: every step is O(1) whatever the
/// queue's length. Invariants (checked by `checkInvariants()` in tests):
/// - `count` equals the length of the add-order list;
/// - each lane's `count` equals its length, and `readyCount` their sum;
/// - an operation is in at most one lane, only while linked and not started;
/// - `executing` counts started, non-bypass operations not yet retired.
struct QueueScheduler {
    struct Lane {
        var head: Unmanaged<Operation>?
        var tail: Unmanaged<Operation>?
        var count = 0
    }

    static let cancelledLane = 0
    static let laneCount = 6

    /// The add-order list. Each linked operation carries one retain owned by
    /// the list (taken in `link`, handed back by `retire`).
    private(set) var head: Unmanaged<Operation>?
    private(set) var tail: Unmanaged<Operation>?
    /// Unfinished operations (`operationCount`).
    private(set) var count = 0
    /// The six lanes, in one allocation owned by the scheduler and freed by
    /// `releaseStorage()` (from `OperationQueue.deinit`). A fixed table
    /// indexed without array bounds or uniqueness checks.
    private let lanes: UnsafeMutablePointer<Lane>
    /// Bit `i` is set while lane `i` is not empty.
    private(set) var nonEmptyLanes: UInt8 = 0
    /// Operations in lanes.
    private(set) var readyCount = 0
    /// Started operations holding a width slot.
    private(set) var executing = 0

    /// `maxConcurrentOperationCount` as set (-1: the system decides).
    var width = -1
    var isSuspended = false

    /// Drain loops requested from the executor or running.
    var drainers = 0
    /// Drain loops currently inside an operation's `start()`.
    var busyDrainers = 0
    /// The most effective drain loops for `width == -1`.
    var defaultDrainerLimit = 64

    /// Progress since the queue was last idle.
    var progressTotal = 0
    var progressCompleted = 0

    /// The barrier that operations added now must wait for, if unfinished.
    var lastBarrier: Operation?

    /// Called once when the queue next becomes empty (blocking and `async` waits).
    var drainCallbacks: [@Sendable () -> Void] = []
    /// Threads waiting for any change (main-thread waits that run operations inline).
    var changeWaiters: [WaitSignal] = []
    /// Bound on unfinished operations (backpressure), or nil.
    var pendingLimit: Int?
    /// Producers waiting for room under `pendingLimit`, in arrival order.
    var roomWaiters: [(count: Int, resume: @Sendable () -> Void)] = []

    var effectiveWidth: Int { width < 0 ? Int.max : width }

    static func lane(forPriorityIndex index: Int) -> Int { 5 - min(4, max(0, index)) }

    init() {
        lanes = .allocate(capacity: Self.laneCount)
        lanes.initialize(repeating: Lane(), count: Self.laneCount)
    }

    /// Frees the lane table. Call once, when the queue is deallocated.
    func releaseStorage() {
        lanes.deinitialize(count: Self.laneCount)
        lanes.deallocate()
    }

    /// The number of operations in lane `index`.
    func count(ofLane index: Int) -> Int { lanes[index].count }

    // MARK: Add-order list

    /// Appends to the add-order list, which takes a retain of the operation.
    mutating func link(_ operation: Operation) {
        precondition(operation.queueFlags & QueueLinkFlags.linked == 0, "linked twice: \(operation)")
        let node = Unmanaged.passRetained(operation)
        operation.queueFlags = QueueLinkFlags.linked
        operation.queueNext = nil
        operation.queuePrevious = tail
        if let tail {
            tail._withUnsafeGuaranteedRef { $0.queueNext = node }
        } else {
            head = node
        }
        tail = node
        count += 1
        if count == 1 && progressCompleted == progressTotal {
            progressTotal = 0
            progressCompleted = 0
        }
        progressTotal += 1
    }

    /// Removes a finished operation and releases its slot. Returns the list's
    /// retain of the operation, which the caller must release after
    /// unlocking (releasing may run a subclass's `deinit`).
    mutating func retire(_ operation: Operation) -> Operation? {
        guard operation.queueFlags & QueueLinkFlags.linked != 0 else { return nil }
        if operation.laneIndex >= 0 { removeFromLane(operation) }
        let flags = operation.queueFlags
        if flags & QueueLinkFlags.started != 0, flags & QueueLinkFlags.bypass == 0 { executing -= 1 }
        operation.queueFlags = 0
        let next = operation.queueNext
        let previous = operation.queuePrevious
        if let next {
            next._withUnsafeGuaranteedRef { $0.queuePrevious = previous }
        } else {
            tail = previous
        }
        if let previous {
            previous._withUnsafeGuaranteedRef { $0.queueNext = next }
        } else {
            head = next
        }
        operation.queueNext = nil
        operation.queuePrevious = nil
        count -= 1
        progressCompleted += 1
        if lastBarrier === operation { lastBarrier = nil }
        return Unmanaged.passUnretained(operation).takeRetainedValue()
    }

    var operations: [Operation] {
        var result: [Operation] = []
        result.reserveCapacity(count)
        var node = head
        while let current = node {
            result.append(current.takeUnretainedValue())
            node = current._withUnsafeGuaranteedRef { $0.queueNext }
        }
        return result
    }

    // MARK: Lanes

    /// Whether `operation` may enter a lane (linked, not started, not in one).
    func canEnterLane(_ operation: Operation) -> Bool {
        operation.queueFlags & QueueLinkFlags.linked != 0
            && operation.queueFlags & QueueLinkFlags.started == 0
            && operation.laneIndex < 0
    }

    mutating func pushReady(_ operation: Operation, lane: Int) {
        let node = Unmanaged.passUnretained(operation)
        operation.laneIndex = Int8(lane)
        operation.laneNext = nil
        operation.lanePrevious = lanes[lane].tail
        if let tail = lanes[lane].tail {
            tail._withUnsafeGuaranteedRef { $0.laneNext = node }
        } else {
            lanes[lane].head = node
        }
        lanes[lane].tail = node
        lanes[lane].count += 1
        nonEmptyLanes |= 1 << UInt8(lane)
        readyCount += 1
    }

    mutating func removeFromLane(_ operation: Operation) {
        let lane = Int(operation.laneIndex)
        guard lane >= 0 else { return }
        let next = operation.laneNext
        let previous = operation.lanePrevious
        if let next {
            next._withUnsafeGuaranteedRef { $0.lanePrevious = previous }
        } else {
            lanes[lane].tail = previous
        }
        if let previous {
            previous._withUnsafeGuaranteedRef { $0.laneNext = next }
        } else {
            lanes[lane].head = next
        }
        operation.laneNext = nil
        operation.lanePrevious = nil
        operation.laneIndex = -1
        lanes[lane].count -= 1
        if lanes[lane].count == 0 { nonEmptyLanes &= ~(1 << UInt8(lane)) }
        readyCount -= 1
    }

    /// Picks the operation to start next and marks it started: cancelled
    /// operations first (without a slot), then the highest priority ready
    /// operation if a slot is free, first in first out within a priority.
    /// An operation found no longer ready (a dependency was added after it
    /// was queued) leaves its lane and is skipped until it is ready again.
    mutating func popNext() -> Operation? {
        guard !isSuspended, nonEmptyLanes != 0 else { return nil }
        if nonEmptyLanes & 1 != 0, let node = lanes[Self.cancelledLane].head {
            let operation = node.takeUnretainedValue()
            removeFromLane(operation)
            operation.queueFlags |= QueueLinkFlags.started | QueueLinkFlags.bypass
            return operation
        }
        guard executing < effectiveWidth else { return nil }
        while nonEmptyLanes != 0 {
            let lane = nonEmptyLanes.trailingZeroBitCount
            guard let node = lanes[lane].head else { break }
            let operation = node.takeUnretainedValue()
            removeFromLane(operation)
            guard operation.loadState().isReady else { continue }
            operation.queueFlags |= QueueLinkFlags.started
            executing += 1
            return operation
        }
        return nil
    }

    /// Pops up to `limit` more cancelled operations (marked started, without
    /// a slot), for a drain loop to retire as one batch.
    mutating func popCancelled(upTo limit: Int, into batch: inout [Operation]) {
        guard !isSuspended else { return }
        while batch.count < limit, let node = lanes[Self.cancelledLane].head {
            let operation = node.takeUnretainedValue()
            removeFromLane(operation)
            operation.queueFlags |= QueueLinkFlags.started | QueueLinkFlags.bypass
            batch.append(operation)
        }
    }

    /// Units of work that drain loops could start now. The cancelled lane
    /// counts as one unit however long it is: retiring a cancelled operation
    /// is tiny, so one drain loop does it best (several would only contend
    /// for the lock).
    var admissibleCount: Int {
        guard !isSuspended else { return 0 }
        let cancelled = lanes[Self.cancelledLane].count
        let slots = max(0, effectiveWidth - executing)
        return (cancelled > 0 ? 1 : 0) + min(readyCount - cancelled, slots)
    }

    /// Requests one more drain loop if admissible work exceeds the idle ones.
    /// Returns the number of drain loops to start (0 or 1).
    mutating func drainersNeeded() -> Int {
        guard readyCount > drainers - busyDrainers else { return 0 }
        let admissible = admissibleCount
        guard admissible > 0 else { return 0 }
        let idle = drainers - busyDrainers
        let limit = (width < 0 ? defaultDrainerLimit : max(1, width)) + (lanes[Self.cancelledLane].count > 0 ? 1 : 0)
        guard admissible > idle, drainers < limit else { return 0 }
        drainers += 1
        return 1
    }

    /// Whether the queue holds operations but none can ever start without
    /// outside help: nothing running, nothing ready, not suspended.
    var isStalled: Bool {
        count > 0 && executing == 0 && readyCount == 0 && busyDrainers == 0 && !isSuspended
    }

    /// Whether `count` more operations fit under the pending limit. An empty
    /// queue always accepts, so a batch larger than the limit cannot wait forever.
    func hasRoom(for added: Int) -> Bool {
        guard let pendingLimit else { return true }
        return count == 0 || count + added <= pendingLimit
    }

    /// Takes everyone to wake after a change: drain waiters if the queue is
    /// empty, change waiters, and producers for whom there is now room.
    mutating func takeWakeups() -> Wakeups {
        var wakeups = Wakeups()
        wakeups.drained = count == 0
        // The common case: nobody waits.
        if drainCallbacks.isEmpty, changeWaiters.isEmpty, roomWaiters.isEmpty { return wakeups }
        if count == 0, !drainCallbacks.isEmpty {
            wakeups.resumptions = drainCallbacks
            drainCallbacks = []
        }
        if !changeWaiters.isEmpty {
            wakeups.signals += changeWaiters
            changeWaiters = []
        }
        var projected = count
        while let first = roomWaiters.first,
              pendingLimit.map({ projected == 0 || projected + first.count <= $0 }) ?? true {
            roomWaiters.removeFirst()
            projected += first.count
            wakeups.resumptions.append(first.resume)
        }
        return wakeups
    }

    // MARK: Invariants

    /// Verifies the invariants above. O(n); for tests and debugging.
    func checkInvariants() -> String? {
        var listed = 0
        var node = head
        var previous: Unmanaged<Operation>? = nil
        while let current = node {
            let operation = current.takeUnretainedValue()
            if operation.queuePrevious?.toOpaque() != previous?.toOpaque() { return "broken back link at \(operation)" }
            if operation.queueFlags & QueueLinkFlags.linked == 0 { return "unflagged \(operation)" }
            listed += 1
            previous = current
            node = operation.queueNext
        }
        if listed != count { return "count \(count) but \(listed) listed" }
        if tail?.toOpaque() != previous?.toOpaque() { return "tail mismatch" }
        var total = 0
        for index in 0..<Self.laneCount {
            let lane = lanes[index]
            var length = 0
            var item = lane.head
            while let current = item {
                let operation = current.takeUnretainedValue()
                if operation.laneIndex != Int8(index) { return "lane index mismatch in lane \(index)" }
                if operation.queueFlags & QueueLinkFlags.started != 0 { return "started operation in lane \(index)" }
                length += 1
                item = operation.laneNext
            }
            if length != lane.count { return "lane \(index) count \(lane.count) but \(length) linked" }
            if (nonEmptyLanes & (1 << UInt8(index)) != 0) != (length > 0) { return "bitmap wrong for lane \(index)" }
            total += length
        }
        if total != readyCount { return "readyCount \(readyCount) but \(total) in lanes" }
        if executing < 0 || drainers < busyDrainers || busyDrainers < 0 { return "negative counters" }
        return nil
    }
}

/// Waiters to wake once the queue's lock is released.
struct Wakeups {
    var signals: [WaitSignal] = []
    var resumptions: [@Sendable () -> Void] = []
    /// The queue became empty.
    var drained = false

    func fire() {
        for signal in signals { signal.signal() }
        for resume in resumptions { resume() }
    }
}
