// The lists a queue keeps its ready operations in. Like `QueueState`, which
// owns them, they are guarded by the queue's lock, call no user code, and
// link operations through their `QueueLink` (borrowing the add-order list's
// retain of each operation, which keeps every linked operation alive).

/// An intrusive first-in, first-out list of operations: a barrier segment's
/// held operations, and the in-order part of a `ReadyLane`.
struct LaneList {
    var head: Unmanaged<Operation>?
    var tail: Unmanaged<Operation>?
    var count = 0

    /// Appends `operation`, recording `lane` as the list that holds it.
    mutating func append(_ operation: Operation, lane: Int8) {
        let node = Unmanaged.passUnretained(operation)
        operation.queueLink.lane = lane
        operation.queueLink.laneNext = nil
        operation.queueLink.lanePrevious = tail
        if let tail {
            tail._withUnsafeGuaranteedRef { $0.queueLink.laneNext = node }
        } else {
            head = node
        }
        tail = node
        count += 1
    }

    /// Unlinks `operation`, which this list holds.
    mutating func remove(_ operation: Operation) {
        let next = operation.queueLink.laneNext
        let previous = operation.queueLink.lanePrevious
        if let next {
            next._withUnsafeGuaranteedRef { $0.queueLink.lanePrevious = previous }
        } else {
            tail = previous
        }
        if let previous {
            previous._withUnsafeGuaranteedRef { $0.queueLink.laneNext = next }
        } else {
            head = next
        }
        operation.queueLink.laneNext = nil
        operation.queueLink.lanePrevious = nil
        operation.queueLink.lane = QueueLink.noLane
        count -= 1
    }
}

/// The ready operations of one lane, first in the order they were added to
/// the queue (when `ordered`), or in the order they became ready.
///
/// A queue that holds ready operations back (its `maxConcurrentOperationCount`
/// is set, or it is suspended) starts those of one priority, as Foundation
/// does, in the order they were added, not the order they became ready: an
/// operation whose dependency finishes late still starts before a ready
/// operation added after it. A running queue of the default width holds
/// nothing back (Foundation hands every ready operation to Dispatch at once,
/// where they run in the order they were handed over), so there the lane
/// keeps the order they became ready in, at O(1); the queue puts its lanes
/// back in add order when it starts holding operations back
/// (`QueueState.orderLanes()`).
///
/// Most operations become ready in add order anyway (an operation ready when
/// added is the queue's newest), so the lane has two parts:
/// - the in-order list, appended to while that holds: O(1);
/// - the late heap, a four-ary min-heap by add sequence, for an operation that
///   became ready when a younger one was already listed (a dependency
///   finished, an `isReady` override turned true, a barrier let its segment
///   go, its priority changed): O(log n). Each operation in it records its
///   position (`QueueLink.heapIndex`), so that leaving the lane (when
///   cancelled, or unready again) is O(log n) too.
///
/// The lane's first operation is the older of the two parts' first ones.
struct ReadyLane {
    struct Entry {
        let sequence: UInt32
        let operation: Unmanaged<Operation>
    }

    private(set) var inOrder = LaneList()
    private(set) var late: [Entry] = []
    /// The add sequence of `inOrder.tail`, kept here so that an insertion
    /// does not read the tail operation (often in another core's cache).
    private var tailSequence: UInt32 = 0
    /// Whether `inOrder` is in add order: false once an unordered insertion
    /// appended an operation older than the tail.
    private(set) var isSorted = true

    var count: Int { inOrder.count + late.count }

    /// Whether add sequence `a` comes before `b`. Sequences wrap: the
    /// comparison holds while the queue's unfinished operations span fewer
    /// than 2³¹ additions.
    @inline(__always)
    static func precedes(_ a: UInt32, _ b: UInt32) -> Bool {
        Int32(bitPattern: a &- b) < 0
    }

    /// The operation that should start first: the oldest.
    var first: Unmanaged<Operation>? {
        guard let head = inOrder.head else { return late.first?.operation }
        guard let top = late.first else { return head }
        let headSequence = head._withUnsafeGuaranteedRef { $0.queueLink.sequence }
        return Self.precedes(top.sequence, headSequence) ? top.operation : head
    }

    /// Adds `operation`, recording `lane` as the lane that holds it: in add
    /// order if `ordered`, else behind the operations already there.
    mutating func insert(_ operation: Operation, lane: Int8, ordered: Bool) {
        let sequence = operation.queueLink.sequence
        let olderThanTail = inOrder.tail != nil && !Self.precedes(tailSequence, sequence)
        if olderThanTail, ordered {
            operation.queueLink.lane = lane
            operation.queueLink.flags |= QueueLink.Flags.inLateHeap
            late.append(Entry(sequence: sequence, operation: .passUnretained(operation)))
            late.withUnsafeMutableBufferPointer { Self.siftUp(from: $0.count - 1, in: $0) }
            return
        }
        if olderThanTail { isSorted = false }
        inOrder.append(operation, lane: lane)
        tailSequence = sequence
    }

    /// Takes out `operation`, which this lane holds.
    mutating func remove(_ operation: Operation) {
        guard operation.queueLink.has(QueueLink.Flags.inLateHeap) else {
            let wasTail = operation.queueLink.laneNext == nil
            inOrder.remove(operation)
            if wasTail, let tail = inOrder.tail {
                tailSequence = tail._withUnsafeGuaranteedRef { $0.queueLink.sequence }
            }
            return
        }
        let index = operation.queueLink.heapIndex
        operation.queueLink.flags &= ~QueueLink.Flags.inLateHeap
        operation.queueLink.heapIndex = 0
        operation.queueLink.lane = QueueLink.noLane
        let last = late.removeLast()
        guard index < late.count else { return }
        late.withUnsafeMutableBufferPointer { heap in
            heap[index] = last
            Self.siftDown(from: index, in: heap)
            Self.siftUp(from: index, in: heap)
        }
    }

    /// Takes every operation out, oldest first (sorted by add sequence),
    /// leaving the lane empty; for reinserting them in add order.
    mutating func takeAll() -> [Operation] {
        var taken: [Operation] = []
        taken.reserveCapacity(count)
        while let node = inOrder.head {
            let operation = node.takeUnretainedValue()
            inOrder.remove(operation)
            taken.append(operation)
        }
        for entry in late {
            let operation = entry.operation.takeUnretainedValue()
            operation.queueLink.flags &= ~QueueLink.Flags.inLateHeap
            operation.queueLink.heapIndex = 0
            operation.queueLink.lane = QueueLink.noLane
            taken.append(operation)
        }
        late.removeAll()
        isSorted = true
        taken.sort { Self.precedes($0.queueLink.sequence, $1.queueLink.sequence) }
        return taken
    }

    // MARK: The late heap

    /// Children per node: four entries of 16 bytes share a cache line, and
    /// the tree is half as deep as a binary one, so fewer operations have
    /// their recorded position rewritten per removal.
    private static let arity = 4

    /// Stores `entry` at `index` and records the position in its operation.
    @inline(__always)
    private static func place(_ entry: Entry, at index: Int, in heap: UnsafeMutableBufferPointer<Entry>) {
        heap[index] = entry
        entry.operation._withUnsafeGuaranteedRef { $0.queueLink.heapIndex = index }
    }

    private static func siftUp(from start: Int, in heap: UnsafeMutableBufferPointer<Entry>) {
        let entry = heap[start]
        var index = start
        while index > 0 {
            let parent = (index - 1) / arity
            guard precedes(entry.sequence, heap[parent].sequence) else { break }
            place(heap[parent], at: index, in: heap)
            index = parent
        }
        place(entry, at: index, in: heap)
    }

    private static func siftDown(from start: Int, in heap: UnsafeMutableBufferPointer<Entry>) {
        let entry = heap[start]
        var index = start
        while true {
            let firstChild = arity * index + 1
            guard firstChild < heap.count else { break }
            var child = firstChild
            var other = firstChild + 1
            let end = min(firstChild + arity, heap.count)
            while other < end {
                if precedes(heap[other].sequence, heap[child].sequence) { child = other }
                other += 1
            }
            guard precedes(heap[child].sequence, entry.sequence) else { break }
            place(heap[child], at: index, in: heap)
            index = child
        }
        place(entry, at: index, in: heap)
    }

    // MARK: Invariants

    /// Verifies the lane: every operation records `lane`, the in-order list
    /// is linked both ways (and sorted, if `ordered`), the heap is ordered
    /// and every entry records its position. Returns the first broken rule,
    /// or nil. O(n).
    func checkInvariants(lane: Int8, ordered: Bool) -> String? {
        var previous: Unmanaged<Operation>?
        var previousSequence: UInt32?
        var listed = 0
        var node = inOrder.head
        while let current = node {
            let link = current._withUnsafeGuaranteedRef { $0.queueLink }
            if link.lane != lane || link.has(QueueLink.Flags.inLateHeap) { return "lane \(lane): list entry records another place" }
            if link.lanePrevious?.toOpaque() != previous?.toOpaque() { return "lane \(lane): broken back link" }
            if ordered || isSorted, let previousSequence, !Self.precedes(previousSequence, link.sequence) {
                return "lane \(lane): list out of add order"
            }
            previousSequence = link.sequence
            previous = current
            listed += 1
            node = link.laneNext
        }
        if inOrder.tail?.toOpaque() != previous?.toOpaque() { return "lane \(lane): tail mismatch" }
        if let previousSequence, previousSequence != tailSequence { return "lane \(lane): stale tail sequence" }
        if listed != inOrder.count { return "lane \(lane): count \(inOrder.count) but \(listed) listed" }
        for (index, entry) in late.enumerated() {
            let link = entry.operation._withUnsafeGuaranteedRef { $0.queueLink }
            if link.lane != lane || !link.has(QueueLink.Flags.inLateHeap) { return "lane \(lane): heap entry records another place" }
            if link.heapIndex != index { return "lane \(lane): heap entry at \(index) records \(link.heapIndex)" }
            if link.sequence != entry.sequence { return "lane \(lane): heap entry with a stale sequence" }
            if index > 0, Self.precedes(entry.sequence, late[(index - 1) / Self.arity].sequence) { return "lane \(lane): heap out of order" }
        }
        return nil
    }
}
