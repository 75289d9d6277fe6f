/// An operation's place in the queue that owns it.
///
/// The record is stored inside the operation (so that moving an operation
/// between the queue's lists allocates nothing and costs O(1)), but it
/// belongs to the queue: only the files of `Queue/` read or write it, and
/// only while the owning queue's lock is held. The operation itself never
/// touches it.
///
/// Neighbour references are `Unmanaged`: the queue's add-order list owns one
/// retain of each linked operation (taken in `QueueState.link`, given back by
/// `QueueState.unlink`), which keeps every operation reachable from these
/// fields alive while it is linked. The lane and held lists borrow that
/// retain.
struct QueueLink {
    /// Neighbours in the add-order list.
    var next: Unmanaged<Operation>?
    var previous: Unmanaged<Operation>?
    /// The place in the ready lane or barrier-held list holding the
    /// operation, two words: its neighbours in a lane's in-order list or a
    /// held list (`laneNext`, `lanePrevious`), or its position in a lane's
    /// late heap (`heapIndex`, with `Flags.inLateHeap`; see `ReadyLane`).
    private var laneWord: UInt = 0
    private var laneOtherWord: UInt = 0
    // The three small fields below fill one word. The operation's barrier
    // segment is not stored: `QueueState` finds it from `sequence` (each
    // segment records the sequence it starts at), and the readiness epoch of
    // an operation whose readiness is user code lives in a table of the
    // queue. Together they keep `Operation` within one malloc size class
    // (see BENCHMARKS.md, W8).

    /// Which list holds the operation for dispatch: `noLane`, a ready lane
    /// (`QueueState.cancelledLane` or a priority lane), or `heldLane` (ready
    /// but waiting behind a barrier).
    var lane: Int8 = QueueLink.noLane
    /// `Flags` bits.
    var flags: UInt16 = 0
    /// The operation's place in the order operations were added to the
    /// queue (wrapping; compared with `ReadyLane.precedes`). Ready
    /// operations of equal priority start in this order, as in Foundation,
    /// and it places the operation in its barrier segment.
    var sequence: UInt32 = 0

    init() {}

    init(previous: Unmanaged<Operation>?, sequence: UInt32) {
        self.previous = previous
        self.sequence = sequence
    }

    /// The next operation in the in-order list or held list holding this one.
    var laneNext: Unmanaged<Operation>? {
        get { Self.reference(laneWord) }
        set { laneWord = Self.word(newValue) }
    }

    /// The previous operation in the in-order list or held list holding this one.
    var lanePrevious: Unmanaged<Operation>? {
        get { Self.reference(laneOtherWord) }
        set { laneOtherWord = Self.word(newValue) }
    }

    /// The position in the late heap holding the operation (meaningful only
    /// with `Flags.inLateHeap`; it shares its storage with `laneNext`, which
    /// an operation in a heap does not use).
    var heapIndex: Int {
        get { Int(bitPattern: laneWord) }
        set { laneWord = UInt(bitPattern: newValue) }
    }

    @inline(__always)
    private static func reference(_ word: UInt) -> Unmanaged<Operation>? {
        guard let pointer = UnsafeRawPointer(bitPattern: word) else { return nil }
        return Unmanaged.fromOpaque(pointer)
    }

    @inline(__always)
    private static func word(_ reference: Unmanaged<Operation>?) -> UInt {
        UInt(bitPattern: reference?.toOpaque())
    }

    static let noLane: Int8 = -1
    static let heldLane: Int8 = 6

    enum Flags {
        /// In the add-order list (owned by the queue).
        static let linked: UInt16 = 1 << 0
        /// Dequeued: its `start()` has been (or is being) called.
        static let dispatched: UInt16 = 1 << 1
        /// Holds one of the `maxConcurrentOperationCount` slots.
        static let holdsSlot: UInt16 = 1 << 2
        /// The queue's barrier operation.
        static let barrier: UInt16 = 1 << 3
        /// Counted in its segment's unfinished operations.
        static let countedInSegment: UInt16 = 1 << 4
        /// Its readiness is user code (`isReady` overridden): evaluated
        /// outside the lock, trusted when popped.
        static let customReadiness: UInt16 = 1 << 5
        /// Its class overrides `start()`: even when cancelled it waits for a
        /// slot, and its `start()` is called.
        static let customStart: UInt16 = 1 << 6
        /// For an operation with `customReadiness`: its override last read
        /// true (what the instruments were told: `.ready` / `.notReady`).
        static let reportedReady: UInt16 = 1 << 7
        /// Finished and unlinked, it keeps its slot while its
        /// `isExecuting`/`isFinished` observers are told
        /// (`QueueState.unlink(_:retirementPending:keepingSlot:)`): the only
        /// flag an unlinked operation carries, cleared by
        /// `QueueState.releaseKeptSlot(of:)`.
        static let keptSlot: UInt16 = 1 << 8
        /// In a lane's late heap rather than its in-order list (`ReadyLane`).
        static let inLateHeap: UInt16 = 1 << 9
        /// Taken by a drain loop and given back before its start began
        /// (`QueueState.giveBack(_:)`): its `.started` event was sent when
        /// it was taken, and is not sent again.
        static let givenBack: UInt16 = 1 << 10
    }

    func has(_ flag: UInt16) -> Bool { flags & flag != 0 }
}
