/// A list of operations that stores zero or one element without allocating.
///
/// Most operations have at most one dependency (chains, fan-out leaves), so
/// the common case costs no array allocation. Order is insertion order. Not
/// thread-safe: the owner's lock guards it.
enum OperationList: Sendable {
    case empty
    case one(Operation)
    case many([Operation])

    var isEmpty: Bool {
        if case .empty = self { return true }
        return false
    }

    var count: Int {
        switch self {
        case .empty: return 0
        case .one: return 1
        case .many(let list): return list.count
        }
    }

    /// - Complexity: O(n).
    func contains(_ operation: Operation) -> Bool {
        switch self {
        case .empty: return false
        case .one(let only): return only === operation
        case .many(let list): return list.contains { $0 === operation }
        }
    }

    /// - Complexity: amortized O(1).
    mutating func append(_ operation: Operation) {
        // Consumed, so that the reference in `.one` moves into the new
        // buffer instead of being retained there and released here.
        switch consume self {
        case .empty:
            self = .one(operation)
        case .one(let only):
            // Graphs usually give an operation a few dependencies: room for
            // four avoids regrowing at the third and fourth. Built in place:
            // one allocation, no growth path.
            self = .many([Operation](unsafeUninitializedCapacity: 4) { buffer, count in
                buffer.initializeElement(at: 0, to: only)
                buffer.initializeElement(at: 1, to: operation)
                count = 2
            })
        case .many(var list):
            list.append(operation)
            self = .many(list)
        }
    }

    /// This list followed by `other`.
    func appending(contentsOf other: OperationList) -> OperationList {
        if other.isEmpty { return self }
        if isEmpty { return other }
        return .many(array + other.array)
    }

    /// Removes the first occurrence. Returns whether it was present.
    /// - Complexity: O(n).
    @discardableResult
    mutating func remove(_ operation: Operation) -> Bool {
        switch self {
        case .empty:
            return false
        case .one(let only):
            guard only === operation else { return false }
            self = .empty
            return true
        case .many(var list):
            guard let index = list.firstIndex(where: { $0 === operation }) else { return false }
            self = .empty
            list.remove(at: index)
            self = list.count == 1 ? .one(list[0]) : .many(list)
            return true
        }
    }

    var array: [Operation] {
        switch self {
        case .empty: return []
        case .one(let only): return [only]
        case .many(let list): return list
        }
    }

    /// Moves the contents out, leaving the list empty.
    mutating func take() -> OperationList {
        let taken = self
        self = .empty
        return taken
    }

    func forEach(_ body: (Operation) throws -> Void) rethrows {
        switch self {
        case .empty: return
        case .one(let only): try body(only)
        case .many(let list): for operation in list { try body(operation) }
        }
    }
}

/// The operations waiting for one operation to finish, held without
/// retaining them.
///
/// A dependent retains its dependencies (`dependencies`, as in Foundation);
/// this reverse edge must not, or a graph that is built and never run would
/// be a reference cycle and leak. It is not `weak` either: a weak reference
/// gives its target a side table, which sends every later retain and release
/// of that operation down the runtime's slow path.
///
/// Safety rule (see `DependencyEdges.swift`): an entry is added and removed
/// only while the owner's lock bit is held, and a dependent removes its own
/// entry before its memory can go away. So while the owner holds its lock,
/// every entry points to valid memory (possibly an operation being
/// deinitialized, which `Operation.retainDependent` turns into nil).
///
/// Removal is O(1) amortized: small lists are scanned, large ones build a
/// position index the first time they are searched, so tearing down a huge
/// fan-out in any order is linear, while building one (which never
/// searches the list) costs one array append per edge. Not thread-safe: the
/// owner's lock guards it.
enum DependentList {
    case empty
    case one(Unmanaged<Operation>)
    case many(DependentArray)

    var isEmpty: Bool { count == 0 }

    /// The number of entries. O(1).
    var count: Int {
        switch self {
        case .empty: return 0
        case .one: return 1
        case .many(let array): return array.live
        }
    }

    /// Whether `operation` has an entry.
    func contains(_ operation: Operation) -> Bool {
        let opaque = Unmanaged.passUnretained(operation).toOpaque()
        switch self {
        case .empty: return false
        case .one(let only): return only.toOpaque() == opaque
        case .many(let array): return array.contains(opaque)
        }
    }

    /// - Complexity: amortized O(1).
    mutating func append(_ operation: Operation) {
        let entry = Unmanaged.passUnretained(operation)
        switch self {
        case .empty:
            self = .one(entry)
        case .one(let only):
            self = .many(DependentArray.make(only, entry))
        case .many(let array):
            if let grown = array.appending(entry) { self = .many(grown) }
        }
    }

    /// Removes `operation`'s entry. Returns whether it was present.
    /// - Complexity: O(1) amortized.
    @discardableResult
    mutating func remove(_ operation: Operation) -> Bool {
        let entry = Unmanaged.passUnretained(operation).toOpaque()
        switch self {
        case .empty:
            return false
        case .one(let only):
            guard only.toOpaque() == entry else { return false }
            self = .empty
            return true
        case .many(let array):
            return array.remove(entry)
        }
    }

    /// Calls `body` with each entry, in the order they were added. Call with
    /// the owner's lock held; see the safety rule above.
    func forEach(_ body: (Unmanaged<Operation>) -> Void) {
        switch self {
        case .empty: return
        case .one(let only): body(only)
        case .many(let array): array.forEach(body)
        }
    }

    /// Moves the entries out, leaving the list empty.
    mutating func take() -> DependentList {
        defer { self = .empty }
        return self
    }
}

/// The storage of a `DependentList` with more than one entry: entries in
/// insertion order with holes for removed ones, and, once the list is large,
/// an index from entry to position.
///
/// One allocation: the entries are tail-allocated after the header. A full
/// buffer is replaced by one twice as large (`appending` returns it), so the
/// list that holds it stores the new reference.
///
/// Like the list that holds it, read and written only while the owning
/// operation's state lock bit is held (never re-entered: no user code runs
/// there). Access goes through the buffer's pointers, so Swift's dynamic
/// exclusivity checks do not apply.
final class DependentArray: ManagedBuffer<DependentArray.Header, UnsafeMutableRawPointer?> {
    struct Header {
        /// Slots in use (live entries and holes), from index 0.
        var count: Int
        /// Slots allocated (the buffer's usable capacity may be larger).
        var capacity: Int
        /// Index of the first slot that may hold a live entry.
        var start: Int
        /// Live entries.
        var live: Int
        /// Positions of entries, built when a list longer than
        /// `indexThreshold` is first searched, and kept up to date from then on.
        var positions: [UnsafeMutableRawPointer: Int]?
        /// Whether each live entry owns a retain of its operation (the
        /// buffer was taken by a finishing operation: `holdEntries`), given
        /// back when the buffer is deallocated.
        var holdsRetains = false
    }

    private static let indexThreshold = 32

    /// A buffer with room for `capacity` entries, holding none.
    private static func make(capacity: Int) -> DependentArray {
        let buffer = create(minimumCapacity: capacity) { _ in
            Header(count: 0, capacity: capacity, start: 0, live: 0, positions: nil, holdsRetains: false)
        }
        // `create` returns an instance of the class it is called on.
        return unsafeDowncast(buffer, to: DependentArray.self)
    }

    /// A list of two entries, with room for two more.
    static func make(_ first: Unmanaged<Operation>, _ second: Unmanaged<Operation>) -> DependentArray {
        let array = make(capacity: 4)
        array.withUnsafeMutablePointers { header, slots in
            slots.initialize(to: first.toOpaque())
            (slots + 1).initialize(to: second.toOpaque())
            header.pointee.count = 2
            header.pointee.live = 2
        }
        return array
    }

    // The header is read through the buffer's pointer everywhere: the
    // `header` property is a class's stored property, which costs a dynamic
    // exclusivity check on every access.

    deinit {
        guard withUnsafeMutablePointerToHeader({ $0.pointee.holdsRetains }) else { return }
        forEach { $0.release() }
    }

    /// Turns the buffer, taken out of its operation's dependents list, into
    /// a list of owned references: `retain` is called with each live entry
    /// and either retains it (once) and returns true, or returns false to
    /// drop it. The retains are given back when the buffer is deallocated.
    /// Call with the former owner's lock held (see `DependentList`).
    func holdEntries(_ retain: (Unmanaged<Operation>) -> Bool) {
        withUnsafeMutablePointers { header, slots in
            header.pointee.positions = nil
            for index in header.pointee.start..<header.pointee.count {
                guard let entry = slots[index] else { continue }
                if !retain(Unmanaged.fromOpaque(entry)) {
                    slots[index] = nil
                    header.pointee.live -= 1
                }
            }
            header.pointee.holdsRetains = true
        }
    }

    /// The number of live entries. O(1).
    var live: Int { withUnsafeMutablePointerToHeader { $0.pointee.live } }

    /// Appends `entry`. Returns the buffer that now holds the list when this
    /// one was full (the caller stores it in place of this one), else nil.
    func appending(_ entry: Unmanaged<Operation>) -> DependentArray? {
        let opaque = entry.toOpaque()
        let full = withUnsafeMutablePointers { header, slots -> Bool in
            guard header.pointee.count < header.pointee.capacity else { return true }
            let index = header.pointee.count
            (slots + index).initialize(to: opaque)
            header.pointee.positions?[opaque] = index
            header.pointee.count += 1
            header.pointee.live += 1
            return false
        }
        guard full else { return nil }
        let grown = regrown()
        _ = grown.appending(entry)
        return grown
    }

    /// A copy with twice the room and without the holes before `start`.
    private func regrown() -> DependentArray {
        withUnsafeMutablePointers { header, slots in
            let used = header.pointee.count - header.pointee.start
            let copy = Self.make(capacity: max(4, used * 2))
            copy.withUnsafeMutablePointers { copyHeader, copySlots in
                copySlots.initialize(from: slots + header.pointee.start, count: used)
                copyHeader.pointee.count = used
                copyHeader.pointee.live = header.pointee.live
            }
            if header.pointee.positions != nil { copy.buildIndex() }
            return copy
        }
    }

    /// Builds the index if the list is long enough to need one.
    @inline(__always)
    private func indexIfLong() {
        let needsIndex = withUnsafeMutablePointerToHeader { $0.pointee.positions == nil && $0.pointee.live > Self.indexThreshold }
        if needsIndex { buildIndex() }
    }

    func contains(_ opaque: UnsafeMutableRawPointer) -> Bool {
        indexIfLong()
        if let found = withUnsafeMutablePointerToHeader({ $0.pointee.positions.map { $0[opaque] != nil } }) { return found }
        return position(of: opaque) != nil
    }

    func remove(_ opaque: UnsafeMutableRawPointer) -> Bool {
        indexIfLong()
        return withUnsafeMutablePointers { header, slots -> Bool in
            let found: Int?
            if header.pointee.positions != nil {
                found = header.pointee.positions?.removeValue(forKey: opaque)
            } else {
                found = position(of: opaque)
            }
            guard let index = found else { return false }
            slots[index] = nil
            header.pointee.live -= 1
            var start = header.pointee.start
            let count = header.pointee.count
            while start < count, slots[start] == nil { start += 1 }
            header.pointee.start = start
            if start > 32, start * 2 > count {
                compact(header, slots)
            } else if count > 64, header.pointee.live * 4 < count {
                // Holes in the middle (removal in another order): compacting
                // after three quarters are gone keeps removal O(1) amortized.
                compact(header, slots)
            }
            return true
        }
    }

    func forEach(_ body: (Unmanaged<Operation>) -> Void) {
        withUnsafeMutablePointers { header, slots in
            var index = header.pointee.start
            let count = header.pointee.count
            while index < count {
                if let entry = slots[index] { body(Unmanaged.fromOpaque(entry)) }
                index += 1
            }
        }
    }

    private func position(of opaque: UnsafeMutableRawPointer) -> Int? {
        withUnsafeMutablePointers { header, slots -> Int? in
            var index = header.pointee.start
            let count = header.pointee.count
            while index < count {
                if slots[index] == opaque { return index }
                index += 1
            }
            return nil
        }
    }

    /// Drops the holes, in place (and rebuilds the index, if there is one).
    private func compact(_ header: UnsafeMutablePointer<Header>, _ slots: UnsafeMutablePointer<UnsafeMutableRawPointer?>) {
        var kept = 0
        for index in header.pointee.start..<header.pointee.count {
            if let entry = slots[index] {
                slots[kept] = entry
                kept += 1
            }
        }
        header.pointee.count = kept
        header.pointee.start = 0
        if header.pointee.positions != nil { fillIndex(header, slots) }
    }

    private func buildIndex() {
        withUnsafeMutablePointers { header, slots in fillIndex(header, slots) }
    }

    private func fillIndex(_ header: UnsafeMutablePointer<Header>, _ slots: UnsafeMutablePointer<UnsafeMutableRawPointer?>) {
        var index: [UnsafeMutableRawPointer: Int] = [:]
        index.reserveCapacity(header.pointee.count * 2)
        for offset in header.pointee.start..<header.pointee.count {
            if let entry = slots[offset] { index[entry] = offset }
        }
        header.pointee.positions = index
    }
}
