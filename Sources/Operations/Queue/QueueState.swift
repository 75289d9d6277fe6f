/// The scheduling state of one `OperationQueue`: which operations it holds,
/// which are ready, which may start next. Guarded by the queue's lock; it
/// calls no user code and performs no side effects, so every decision about
/// *when a queued operation starts* is made here.
///
/// ## Lists
/// - The add-order list of unfinished operations (`operations`), linked
///   through each operation's `QueueLink`; it owns one retain of each.
/// - Six ready lanes (`ReadyLane`): lane 0 holds cancelled operations
///   whose class keeps the base `start()` (retired without a slot of
///   `maxConcurrentOperationCount`); lanes 1 ... 5 hold ready operations by
///   priority, very high first, in the order they were added within a lane
///   (however late each became ready), as Foundation starts them.
/// - Per barrier segment, a held list: operations that are ready but were
///   added after a barrier that has not finished.
///
/// ## Barriers
/// The barriers cut the add order into segments; each segment records the
/// add sequence it starts at, and an operation's segment is found from its
/// own add sequence (`segmentIndex(in:ofSequence:)`). A barrier gates the
/// segment that follows it and every later one: their operations start only
/// after the barrier has finished (cancelled operations excepted, as they
/// ignore dependencies). A barrier itself starts when every operation added
/// before it has finished, which is when its segment becomes the front of
/// `segments`; but a cancelled barrier retires at once, possibly before
/// earlier barriers, so a segment whose own barrier is gone stays held while
/// an earlier one is unfinished (`firstGated`; probe 27).
///
/// ## Readiness
/// An operation enters a lane only when it is ready (as its class reports it;
/// see `OperationQueue.memberReadinessMayHaveChanged`), so picking the next
/// operation never scans waiting ones. An operation whose readiness is the
/// base state is re-checked when popped (a dependency may have been added
/// since); one whose readiness is user code is trusted as last evaluated.
///
/// Every step is O(1) amortized, whatever the queue's length.
/// `checkInvariants()` verifies the bookkeeping in tests.
struct QueueState {
    struct Segment {
        /// The barrier that gates this segment, until it finishes.
        var gate: Unmanaged<Operation>?
        /// The add sequence (`QueueLink.sequence`) of the segment's first
        /// operation: the one after its barrier's. An operation belongs to
        /// the last segment that starts at or before its sequence.
        var start: UInt32 = 0
        /// Unfinished non-barrier operations of the segment.
        var unfinished = 0
        /// Ready operations waiting for `gate`.
        var held = LaneList()
    }

    static let cancelledLane = 0
    static let laneCount = 6

    static func lane(forPriorityIndex index: Int) -> Int { 5 - min(4, max(0, index)) }

    // MARK: Stored state

    private(set) var head: Unmanaged<Operation>?
    private(set) var tail: Unmanaged<Operation>?
    /// Unfinished operations (`operationCount`).
    private(set) var count = 0
    /// The add sequence of the next operation linked (`QueueLink.sequence`).
    private(set) var nextSequence: UInt32 = 0
    /// The lanes, in one allocation freed by `releaseStorage()`. Changed
    /// only in this file (read by `checkInvariants()`).
    let lanes: UnsafeMutablePointer<ReadyLane>
    /// Bit `i` is set while lane `i` is not empty.
    private(set) var nonEmptyLanes: UInt8 = 0
    /// Operations in lanes (not counting held ones).
    private(set) var readyCount = 0
    /// Operations holding a slot of `maxConcurrentOperationCount`.
    private(set) var executing = 0
    /// Finished operations that left the list but keep their slot until
    /// their `isExecuting`/`isFinished` observers have been told (see
    /// `unlink(_:retirementPending:keepingSlot:)`).
    private(set) var keptSlots = 0

    /// `maxConcurrentOperationCount` as set (-1: the system decides).
    var width = -1 {
        didSet { if holdsReadyBack { orderLanes() } }
    }
    var isSuspended = false {
        didSet { if holdsReadyBack { orderLanes() } }
    }

    /// Whether the queue may hold ready operations back (a width is set, or
    /// it is suspended): its lanes then keep their operations in the order
    /// they were added (see `ReadyLane`).
    var holdsReadyBack: Bool { width >= 0 || isSuspended }

    /// Barrier segments, oldest unfinished first.
    private(set) var segments: [Segment] = [Segment()]
    /// The index of the first segment whose barrier has not finished, or
    /// `segments.count` if there is none: the operations of that segment
    /// and of every later one are held.
    private(set) var firstGated = 1

    /// For operations whose readiness is user code: the epoch of the newest
    /// readiness evaluation started (see `beginReadinessEvaluation(of:)`).
    /// An entry lives while its operation is linked.
    private(set) var readinessEpochs: [ObjectIdentifier: UInt64] = [:]
    private var nextReadinessEpoch: UInt64 = 0

    /// The drain loops: requested, running, busy, held back (`DrainLoops`).
    private(set) var loops = DrainLoops()

    /// Finished operations removed from the list whose observers, completion
    /// block and waiters have not all run yet.
    private(set) var retiring = 0

    /// Progress since the queue was last idle.
    private(set) var progressTotal = 0
    private(set) var progressCompleted = 0

    /// Bound on unfinished operations (backpressure), or nil.
    var pendingLimit: Int?

    init() {
        lanes = .allocate(capacity: Self.laneCount)
        lanes.initialize(repeating: ReadyLane(), count: Self.laneCount)
    }

    /// Frees the lane table. Call once, when the queue is deallocated.
    func releaseStorage() {
        lanes.deinitialize(count: Self.laneCount)
        lanes.deallocate()
    }

    /// The number of operations in lane `index`.
    func count(ofLane index: Int) -> Int { lanes[index].count }

    /// The number of operations waiting behind barriers.
    var heldCount: Int { segments.reduce(0) { $0 + $1.held.count } }

    var effectiveWidth: Int { width < 0 ? Int.max : width }

    /// Whether the queue holds nothing and no retirement is in flight: what
    /// queue waiters wait for, and when the queue stops retaining itself.
    var isIdle: Bool { count == 0 && retiring == 0 }

    // MARK: The add-order list

    /// Appends `operation` (which the list retains) as a member of the
    /// current segment, or as a new barrier that gates the operations added
    /// after it. `customReadiness` and `customStart` tell whether its
    /// readiness and `start()` are user code.
    mutating func link(_ operation: Operation, barrier: Bool, customReadiness: Bool, customStart: Bool) {
        let node = Unmanaged.passRetained(operation)
        var flags = QueueLink.Flags.linked
        if customReadiness { flags |= QueueLink.Flags.customReadiness }
        if customStart { flags |= QueueLink.Flags.customStart }
        operation.queueLink = QueueLink(previous: tail, sequence: nextSequence)
        nextSequence &+= 1
        if barrier {
            flags |= QueueLink.Flags.barrier
            openSegment(gatedBy: node)
        } else {
            flags |= QueueLink.Flags.countedInSegment
            segments[segments.count - 1].unfinished += 1
        }
        operation.queueLink.flags = flags
        if let tail {
            tail._withUnsafeGuaranteedRef { $0.queueLink.next = node }
        } else {
            head = node
        }
        tail = node
        count += 1
        if count == 1 && retiring == 0 && progressCompleted == progressTotal {
            progressTotal = 0
            progressCompleted = 0
        }
        progressTotal += 1
    }

    /// Removes a finished operation: frees its slot, advances barriers, and
    /// returns the list's retain of it (still counted), which the caller
    /// releases after unlocking (releasing may run a subclass's `deinit`). `retirementPending`
    /// counts its observers as in flight, until
    /// `retirementDone()`.
    ///
    /// With `keepingSlot`, an operation that holds a slot keeps it (counted
    /// in `keptSlots`, flagged `QueueLink.Flags.keptSlot`) until
    /// `releaseKeptSlot(of:)`: its `isExecuting`/`isFinished` observers are
    /// told before the slot can start the next operation (Foundation's
    /// order), while the queue knows that the slot is taken, so that its
    /// requests for drain loops stay true.
    mutating func unlink(_ operation: Operation, retirementPending: Bool, keepingSlot: Bool = false) -> Unmanaged<Operation>? {
        // The fields are read one by one: copying the whole record costs a
        // `memcpy` call on this path.
        let link = (flags: operation.queueLink.flags, sequence: operation.queueLink.sequence,
                    next: operation.queueLink.next, previous: operation.queueLink.previous)
        guard link.flags & QueueLink.Flags.linked != 0 else { return nil }
        removeFromLane(operation)
        let keepsSlot = keepingSlot && link.flags & QueueLink.Flags.holdsSlot != 0
        if link.flags & QueueLink.Flags.holdsSlot != 0 { executing -= 1 }
        if link.flags & QueueLink.Flags.countedInSegment != 0 {
            let index = Self.segmentIndex(in: segments, ofSequence: link.sequence)
            segments[index].unfinished -= 1
        }
        if link.flags & QueueLink.Flags.customReadiness != 0, !readinessEpochs.isEmpty {
            readinessEpochs[ObjectIdentifier(operation)] = nil
        }
        if link.flags & QueueLink.Flags.barrier != 0 {
            // The segment it gates starts right after it, and lives until
            // this barrier has finished.
            let gated = Self.segmentIndex(in: segments, ofSequence: link.sequence &+ 1)
            segments[gated].gate = nil
            if gated == firstGated {
                // The segments up to the next unfinished barrier open, in
                // add order. A barrier retired before an earlier one (it was
                // cancelled) releases nothing: the earlier one still holds
                // every later segment.
                var next = gated + 1
                while next < segments.count, segments[next].gate == nil { next += 1 }
                firstGated = next
                for index in gated..<next { releaseHeld(segment: index) }
            }
        }
        if let next = link.next {
            next._withUnsafeGuaranteedRef { $0.queueLink.previous = link.previous }
        } else {
            tail = link.previous
        }
        if let previous = link.previous {
            previous._withUnsafeGuaranteedRef { $0.queueLink.next = link.next }
        } else {
            head = link.next
        }
        operation.queueLink = QueueLink()
        if keepsSlot {
            operation.queueLink.flags = QueueLink.Flags.keptSlot
            keptSlots += 1
        }
        count -= 1
        progressCompleted += 1
        if retirementPending { retiring += 1 }
        advanceSegments()
        return Unmanaged.passUnretained(operation)
    }

    /// Frees the slot that `operation` kept when it was unlinked, once: its
    /// observers have been told, or the thread telling them is about to
    /// block in a wait (which may be for work that needs the slot). Returns
    /// whether a slot was freed.
    mutating func releaseKeptSlot(of operation: Operation) -> Bool {
        guard operation.queueLink.has(QueueLink.Flags.keptSlot) else { return false }
        operation.queueLink.flags &= ~QueueLink.Flags.keptSlot
        keptSlots -= 1
        return true
    }

    /// A finished operation that its drain loop has not retired yet gives
    /// up its slot early, once: a thread telling the `isReady` observers of
    /// a dependent it made ready is about to block in a wait, which may
    /// need the slot (`PendingAdmission`). Its retirement then frees
    /// nothing, and keeps no slot. Returns whether a slot was freed.
    mutating func releaseSlotEarly(of operation: Operation) -> Bool {
        let flags = operation.queueLink.flags
        guard flags & QueueLink.Flags.linked != 0, flags & QueueLink.Flags.holdsSlot != 0 else { return false }
        operation.queueLink.flags = flags & ~QueueLink.Flags.holdsSlot
        executing -= 1
        return true
    }

    /// Slots in use: by dispatched operations, and kept by finished ones
    /// whose observers are being told.
    var usedSlots: Int { executing + keptSlots }

    /// A retirement counted by `unlink` has finished.
    mutating func retirementDone(_ count: Int = 1) {
        retiring -= count
    }

    /// A thread that is inside `count` of this queue's retirements waits
    /// for the queue: its own retirements must not keep it waiting
    /// (`stepAside` true), and count again when the wait ends (false).
    mutating func retirementStepsAside(_ stepAside: Bool, count: Int = 1) {
        retiring += stepAside ? -count : count
    }

    // MARK: Readiness

    /// Applies a readiness evaluation: `ready` and `cancelled` as the
    /// operation's class reports them. Puts a ready operation in its lane
    /// (or behind its barrier), takes an unready one out. Keeps the position
    /// of an operation already in the right lane.
    mutating func apply(_ operation: Operation, ready: Bool, cancelled: Bool) {
        let link = operation.queueLink
        guard link.has(QueueLink.Flags.linked), !link.has(QueueLink.Flags.dispatched) else { return }
        guard ready else {
            removeFromLane(operation)
            return
        }
        let target = targetLane(for: operation, cancelled: cancelled)
        if link.lane == target { return }
        removeFromLane(operation)
        guard let target else { return }
        if target == QueueLink.heldLane {
            let index = Self.segmentIndex(in: segments, ofSequence: link.sequence)
            segments[index].held.append(operation, lane: QueueLink.heldLane)
        } else {
            push(operation, lane: Int(target))
        }
    }

    /// Where a ready operation goes: the cancelled lane (cheap path), held
    /// behind its barrier, its priority lane, or nowhere (a barrier that
    /// cannot start yet).
    @inline(__always)
    private func targetLane(for operation: Operation, cancelled: Bool) -> Int8? {
        let link = operation.queueLink
        if cancelled {
            return link.has(QueueLink.Flags.customStart)
                ? Int8(Self.lane(forPriorityIndex: operation.loadState().priorityIndex))
                : Int8(Self.cancelledLane)
        }
        if link.has(QueueLink.Flags.barrier) {
            guard segments[0].gate?.toOpaque() == Unmanaged.passUnretained(operation).toOpaque() else { return nil }
        } else if Self.segmentIndex(in: segments, ofSequence: link.sequence) >= firstGated {
            return QueueLink.heldLane
        }
        return Int8(Self.lane(forPriorityIndex: operation.loadState().priorityIndex))
    }

    /// A queued operation's priority changed: move it to its new lane (in
    /// its add order there) if it is in a priority lane.
    mutating func priorityChanged(_ operation: Operation) {
        let lane = operation.queueLink.lane
        guard lane > 0, lane != QueueLink.heldLane else { return }
        let target = Self.lane(forPriorityIndex: operation.loadState().priorityIndex)
        guard Int(lane) != target else { return }
        removeFromLane(operation)
        push(operation, lane: target)
    }

    // MARK: Dispatch

    /// Picks the operation to start next and marks it dispatched: a cancelled
    /// operation first (without a slot), then the highest-priority ready
    /// operation if a slot is free. Returns nil when nothing can start.
    ///
    /// Unretained: the list holds it while it is linked; a caller that
    /// starts it retains it before releasing the lock (once the lock is
    /// released, it may finish, leave the list and be released on another
    /// thread, before or while its `start()` runs).
    mutating func popNext() -> Unmanaged<Operation>? {
        guard !isSuspended, nonEmptyLanes != 0 else { return nil }
        if nonEmptyLanes & 1 != 0, let node = lanes[Self.cancelledLane].first {
            node._withUnsafeGuaranteedRef { operation in
                removeFromLane(operation)
                _ = operation.claimForDispatch(.none)
                operation.queueLink.flags |= QueueLink.Flags.dispatched
            }
            return node
        }
        guard usedSlots < effectiveWidth else { return nil }
        while nonEmptyLanes != 0 {
            let lane = nonEmptyLanes.trailingZeroBitCount
            guard let node = lanes[lane].first else { break }
            let startable = node._withUnsafeGuaranteedRef { operation -> Bool in
                removeFromLane(operation)
                // A base-readiness operation may have gained a dependency since
                // it entered the lane: it comes back when that finishes. An
                // `isReady` override read before a dependency counted comes
                // back if the re-read the edit requested finds it ready. The
                // check and the mark are one step under the operation's lock,
                // so that a dependency added from now on does not count.
                let custom = operation.queueLink.has(QueueLink.Flags.customReadiness)
                guard operation.claimForDispatch(custom ? .freshReadiness : .baseReadiness) else { return false }
                operation.queueLink.flags |= QueueLink.Flags.dispatched | QueueLink.Flags.holdsSlot
                return true
            }
            guard startable else { continue }
            executing += 1
            return node
        }
        return nil
    }

    /// Pops up to `limit` more cancelled operations (dispatched, no slot),
    /// for a drain loop to retire as one batch.
    ///
    /// The batch ends before an observed operation: all but one of a batch's
    /// user tails run on other threads, and an observer must hear "did
    /// `isFinished`" on the thread that told it "will" (with the old value
    /// read then). The observed one starts a later step of its own.
    mutating func popCancelled(upTo limit: Int, into batch: inout [Operation]) {
        guard !isSuspended else { return }
        while batch.count < limit, let node = lanes[Self.cancelledLane].first {
            let operation = node.takeUnretainedValue()
            if operation.loadState().isObserved { return }
            removeFromLane(operation)
            _ = operation.claimForDispatch(.none)
            operation.queueLink.flags |= QueueLink.Flags.dispatched
            batch.append(operation)
        }
    }

    /// Puts back an operation that `popNext` or `popCancelled` took and
    /// whose start has not begun: the drain loop that took it is about to
    /// block in user code that runs on its thread before the start (the
    /// `deinit` of an operation it let go of), which may wait for this very
    /// operation (see `OperationQueue.threadWillBlock`). It frees its slot
    /// and goes back to the lane it came from: in add order there when the
    /// queue holds ready operations back, so a serial queue keeps its order.
    ///
    /// The operation stays marked dispatched in its own state
    /// (`OperationState.isDispatched` is never cleared): a dependency added
    /// since it was taken still does not count, as when it was taken.
    mutating func giveBack(_ operation: Operation) {
        let flags = operation.queueLink.flags
        guard flags & QueueLink.Flags.linked != 0, flags & QueueLink.Flags.dispatched != 0 else { return }
        let heldSlot = flags & QueueLink.Flags.holdsSlot != 0
        operation.queueLink.flags = (flags & ~(QueueLink.Flags.dispatched | QueueLink.Flags.holdsSlot)) | QueueLink.Flags.givenBack
        if heldSlot { executing -= 1 }
        // Taken from a priority lane when it took a slot, from the
        // cancelled lane otherwise.
        push(operation, lane: heldSlot ? Self.lane(forPriorityIndex: operation.loadState().priorityIndex) : Self.cancelledLane)
    }

    /// Units of work drain loops could start now. The cancelled lane counts
    /// as one unit however long it is: one loop retires it in batches.
    var admissibleCount: Int {
        guard !isSuspended else { return 0 }
        let cancelled = lanes[Self.cancelledLane].count
        let slots = width < 0 ? Int.max : max(0, width - usedSlots)
        return (cancelled > 0 ? 1 : 0) + min(readyCount - cancelled, slots)
    }

    /// Whether one more drain loop should be requested (`.post`), held back
    /// and watched (`.watch`), or neither: see `DrainLoops.request`.
    /// `mayHoldBack`: the queue runs on the shared pool.
    mutating func takeDrainerRequest(mayHoldBack: Bool) -> DrainLoops.Request {
        loops.request(admissible: admissibleCount, mayHoldBack: mayHoldBack)
    }

    /// A requested drain loop starts running.
    mutating func drainerStarted() { loops.started() }

    /// A drain loop stops.
    mutating func drainerStopped() { loops.stopped() }

    /// A drain loop enters (true) or leaves (false) an operation's `start()`.
    mutating func drainerBusy(_ busy: Bool) { loops.setBusy(busy) }

    /// A requested drain loop could not be delivered (its executor refused it).
    mutating func drainerRequestDropped() { loops.requestDropped() }

    /// A drain loop of this queue is about to wait in one of the library's
    /// waits: see `DrainLoops.loopWillBlock`.
    mutating func drainLoopWillBlock() -> Bool { loops.loopWillBlock() }

    /// A drain loop timed operations that are not tiny: see
    /// `DrainLoops.loopIsSlow`.
    mutating func drainLoopIsSlow() { loops.loopIsSlow() }

    /// The watcher's look at the queue's loops: see `DrainLoops.watch`.
    mutating func watchDrainLoops(seen: DrainLoops.Mark?, returned: UInt64, stuck: Bool) -> (keepsWatching: Bool, mark: DrainLoops.Mark) {
        loops.watch(seen: seen, returned: returned, admissible: admissibleCount, stuck: stuck)
    }

    /// Whether the queue holds operations but none can start without outside
    /// help: nothing dispatched, nothing ready, not suspended.
    var isStalled: Bool {
        count > 0 && usedSlots == 0 && readyCount == 0 && loops.busy == 0 && !isSuspended
    }

    /// Whether `added` more operations fit under the pending limit, after
    /// `reserved` more that earlier adds are entitled to. An empty queue
    /// with nothing reserved always accepts, so that a batch larger than the
    /// limit cannot wait forever.
    func hasRoom(for added: Int, after reserved: Int = 0) -> Bool {
        guard let pendingLimit, count > 0 || reserved > 0 else { return true }
        return added <= pendingLimit - count - reserved
    }

    // MARK: Lanes

    private mutating func push(_ operation: Operation, lane: Int) {
        lanes[lane].insert(operation, lane: Int8(lane), ordered: holdsReadyBack)
        nonEmptyLanes |= 1 << UInt8(lane)
        readyCount += 1
    }

    /// Puts every lane in add order: the queue holds ready operations back
    /// from now on. O(n log n) for a lane that took operations out of add
    /// order while the queue held nothing back; nothing otherwise.
    private mutating func orderLanes() {
        for index in 0..<Self.laneCount where !lanes[index].isSorted {
            for operation in lanes[index].takeAll() {
                lanes[index].insert(operation, lane: Int8(index), ordered: true)
            }
        }
    }

    /// Takes `operation` out of whichever lane or held list holds it.
    mutating func removeFromLane(_ operation: Operation) {
        let lane = operation.queueLink.lane
        guard lane != QueueLink.noLane else { return }
        if lane == QueueLink.heldLane {
            let index = Self.segmentIndex(in: segments, ofSequence: operation.queueLink.sequence)
            segments[index].held.remove(operation)
            return
        }
        lanes[Int(lane)].remove(operation)
        if lanes[Int(lane)].count == 0 { nonEmptyLanes &= ~(1 << UInt8(lane)) }
        readyCount -= 1
    }

    // MARK: Barrier segments

    /// Opens the segment of the operations added after the barrier `node`,
    /// which was just numbered.
    @inline(never)
    private mutating func openSegment(gatedBy node: Unmanaged<Operation>) {
        if segments.count == 1 {
            // A lone segment's start is not kept up to date (its lookups
            // need none) and may have been passed by wrapping sequences:
            // restart it at the oldest operation it holds.
            segments[0].start = head.map { $0._withUnsafeGuaranteedRef { $0.queueLink.sequence } }
                ?? node._withUnsafeGuaranteedRef { $0.queueLink.sequence }
        }
        // With no unfinished barrier, `firstGated` was `segments.count`:
        // it now points at the new segment.
        segments.append(Segment(gate: node, start: nextSequence))
    }

    /// The index in `segments` of the segment holding the operation added
    /// with `sequence`: the last one starting at or before it. Call only for
    /// a linked operation that is not a barrier (its segment lives while it
    /// is unfinished), or with the sequence after a linked barrier's (the
    /// segment it gates). O(1) without barriers, O(log segments) with them.
    // Static, on the array alone: a method of the whole state, called while
    // it is being changed, makes the compiler copy the state.
    @inline(__always)
    static func segmentIndex(in segments: [Segment], ofSequence sequence: UInt32) -> Int {
        segments.count == 1 ? 0 : searchSegments(segments, forSequence: sequence)
    }

    /// `segmentIndex(in:ofSequence:)` with more than one segment.
    @inline(never)
    private static func searchSegments(_ segments: [Segment], forSequence sequence: UInt32) -> Int {
        let last = segments.count - 1
        // Offsets from the first live segment's start order the live
        // sequences, which span less than 2^32 (as `ReadyLane.precedes` assumes).
        let base = segments[0].start
        let offset = sequence &- base
        if segments[last].start &- base <= offset { return last }
        var low = 0
        var high = last - 1
        while low < high {
            let middle = (low + high + 1) / 2
            if segments[middle].start &- base <= offset { low = middle } else { high = middle - 1 }
        }
        return low
    }

    /// Numbers the next operations from `sequence`. Only for an empty
    /// queue; tests use it to cross the point where sequences wrap.
    mutating func setNextSequence(_ sequence: UInt32) {
        precondition(count == 0 && segments.count == 1, "only for an empty queue")
        nextSequence = sequence
    }

    // MARK: Readiness that is user code

    /// Starts a readiness evaluation of `operation`, whose readiness is user
    /// code: returns its epoch, which makes every earlier evaluation of the
    /// operation stale.
    ///
    /// If a dependency counted since the last reading (the operation's
    /// readiness is stale), the operation leaves its lane until this
    /// evaluation applies: the reading it was admitted on no longer holds.
    mutating func beginReadinessEvaluation(of operation: Operation) -> UInt64 {
        if operation.takeStaleReadiness() { removeFromLane(operation) }
        nextReadinessEpoch &+= 1
        readinessEpochs[ObjectIdentifier(operation)] = nextReadinessEpoch
        return nextReadinessEpoch
    }

    /// Whether the evaluation with `epoch` is the newest one of `operation`.
    func isNewestReadinessEvaluation(_ epoch: UInt64, of operation: Operation) -> Bool {
        readinessEpochs[ObjectIdentifier(operation)] == epoch
    }

    /// Moves the held operations of segment `index` to their lanes: its
    /// barrier and every earlier one have finished. They are released
    /// together, so they go in add order (the order Foundation starts them
    /// in) whether or not the queue holds ready operations back.
    private mutating func releaseHeld(segment index: Int) {
        var released: [Operation] = []
        released.reserveCapacity(segments[index].held.count)
        while let node = segments[index].held.head {
            let operation = node.takeUnretainedValue()
            segments[index].held.remove(operation)
            released.append(operation)
        }
        released.sort { ReadyLane.precedes($0.queueLink.sequence, $1.queueLink.sequence) }
        for operation in released {
            push(operation, lane: Self.lane(forPriorityIndex: operation.loadState().priorityIndex))
        }
    }

    /// Drops complete segments from the front; the barrier that gates the new
    /// front segment may then start.
    private mutating func advanceSegments() {
        var advanced = false
        while segments.count > 1, segments[0].unfinished == 0, segments[0].gate == nil {
            segments.removeFirst()
            firstGated -= 1
            advanced = true
        }
        guard advanced, let gate = segments[0].gate else { return }
        let barrier = gate.takeUnretainedValue()
        // The barrier's readiness is the base state (a library class), which
        // may be read here.
        let state = barrier.loadState()
        apply(barrier, ready: state.isBaseReady, cancelled: state.isCancelled)
    }

    /// Re-evaluates the front barrier after it was linked.
    mutating func barrierLinked(_ barrier: Operation) {
        advanceSegments()
        if segments[0].gate?.toOpaque() == Unmanaged.passUnretained(barrier).toOpaque() {
            let state = barrier.loadState()
            apply(barrier, ready: state.isBaseReady, cancelled: state.isCancelled)
        }
    }
}
