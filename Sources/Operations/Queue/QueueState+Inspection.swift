// What a queue's scheduling state can tell without changing: its lists in
// add order, what holds an operation back (for diagnostics and the wait
// check), and the bookkeeping checks that tests run. Read-only, so kept
// apart from the transitions in `QueueState.swift`.

extension QueueState {
    /// The unfinished operations in add order.
    var operations: [Operation] {
        var result: [Operation] = []
        result.reserveCapacity(count)
        var node = head
        while let current = node {
            result.append(current.takeUnretainedValue())
            node = current._withUnsafeGuaranteedRef { $0.queueLink.next }
        }
        return result
    }

    /// The operations holding a slot (dispatched, not finished).
    var slotHolders: [Operation] {
        operations.filter { $0.queueLink.has(QueueLink.Flags.holdsSlot) }
    }

    /// The unfinished barrier that holds `operation` back, if any: for an
    /// ordinary operation the last unfinished barrier added before it (which
    /// itself waits for the earlier ones); a barrier itself waits for every
    /// earlier operation instead (see `operationsBefore`).
    func gate(of operation: Operation) -> Unmanaged<Operation>? {
        let link = operation.queueLink
        guard link.has(QueueLink.Flags.linked), !link.has(QueueLink.Flags.barrier) else { return nil }
        var index = Self.segmentIndex(in: segments, ofSequence: link.sequence)
        while index >= firstGated {
            if let gate = segments[index].gate { return gate }
            index -= 1
        }
        return nil
    }

    /// The unfinished operations added before the barrier `operation`.
    func operationsBefore(barrier operation: Operation) -> [Operation] {
        var result: [Operation] = []
        var node = head
        while let current = node, current.toOpaque() != Unmanaged.passUnretained(operation).toOpaque() {
            result.append(current.takeUnretainedValue())
            node = current._withUnsafeGuaranteedRef { $0.queueLink.next }
        }
        return result
    }

    // MARK: Invariants

    /// Verifies the bookkeeping. O(n); for tests and debugging. Returns a
    /// description of the first broken invariant, or nil.
    func checkInvariants() -> String? {
        var listed = 0
        var node = head
        var previous: Unmanaged<Operation>?
        var dispatchedWithSlot = 0
        var perSegment: [Int: Int] = [:]
        while let current = node {
            let operation = current.takeUnretainedValue()
            let link = operation.queueLink
            if link.previous?.toOpaque() != previous?.toOpaque() { return "broken back link at \(operation)" }
            if !link.has(QueueLink.Flags.linked) { return "unflagged \(operation)" }
            if link.has(QueueLink.Flags.holdsSlot) { dispatchedWithSlot += 1 }
            if link.has(QueueLink.Flags.dispatched), link.lane != QueueLink.noLane { return "dispatched operation in a lane" }
            if link.has(QueueLink.Flags.countedInSegment) {
                if link.sequence &- segments[0].start >= nextSequence &- segments[0].start {
                    return "operation in a dropped segment"
                }
                perSegment[Self.segmentIndex(in: segments, ofSequence: link.sequence), default: 0] += 1
            }
            listed += 1
            previous = current
            node = link.next
        }
        if listed != count { return "count \(count) but \(listed) listed" }
        if tail?.toOpaque() != previous?.toOpaque() { return "tail mismatch" }
        if dispatchedWithSlot != executing { return "executing \(executing) but \(dispatchedWithSlot) hold slots" }
        var total = 0
        for index in 0..<Self.laneCount {
            if let broken = lanes[index].checkInvariants(lane: Int8(index), ordered: holdsReadyBack) { return broken }
            let length = lanes[index].count
            if (nonEmptyLanes & (1 << UInt8(index)) != 0) != (length > 0) { return "bitmap wrong for lane \(index)" }
            total += length
        }
        if total != readyCount { return "readyCount \(readyCount) but \(total) in lanes" }
        let gated = segments.firstIndex { $0.gate != nil } ?? segments.count
        if gated != firstGated { return "first gated segment \(gated) but \(firstGated) recorded" }
        for (offset, segment) in segments.enumerated() {
            if segment.unfinished != perSegment[offset, default: 0] {
                return "segment \(offset) counts \(segment.unfinished) but holds \(perSegment[offset, default: 0])"
            }
            if offset < firstGated, segment.held.count > 0 { return "open segment \(offset) holds operations" }
        }
        if readinessEpochs.count > count { return "readiness epochs kept for unlinked operations" }
        if executing < 0 || keptSlots < 0 || retiring < 0 || !loops.isConsistent {
            return "negative or impossible counters"
        }
        return nil
    }
}
