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
        switch self {
        case .empty:
            self = .one(operation)
        case .one(let only):
            // Graphs usually give an operation a few dependencies: room for
            // four avoids regrowing at the second and third.
            var list: [Operation] = []
            list.reserveCapacity(4)
            list.append(only)
            list.append(operation)
            self = .many(list)
        case .many(var list):
            self = .empty  // drop the enum's reference so the array is unique
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
            self = .many(DependentArray(only, entry))
        case .many(let array):
            array.append(entry)
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
final class DependentArray {
    // Like the list that holds it, read and written only while the owning
    // operation's state lock bit is held (never re-entered: no user code
    // runs there), so Swift's dynamic exclusivity checks, about 80
    // instructions per access, are turned off.
    @exclusivity(unchecked) private var entries: [UnsafeMutableRawPointer?]
    /// Index of the first entry that may be live.
    @exclusivity(unchecked) private var start = 0
    @exclusivity(unchecked) private(set) var live: Int
    /// Positions of entries, built when a list longer than `indexThreshold`
    /// is first searched, and kept up to date from then on.
    @exclusivity(unchecked) private var positions: [UnsafeMutableRawPointer: Int]?

    private static let indexThreshold = 32

    /// A list of two entries, with room for two more (no temporary array).
    init(_ first: Unmanaged<Operation>, _ second: Unmanaged<Operation>) {
        entries = []
        entries.reserveCapacity(4)
        entries.append(first.toOpaque())
        entries.append(second.toOpaque())
        live = 2
    }

    func append(_ entry: Unmanaged<Operation>) {
        let opaque = entry.toOpaque()
        positions?[opaque] = entries.count
        entries.append(opaque)
        live += 1
    }

    /// Builds the index if the list is long enough to need one.
    @inline(__always)
    private func indexIfLong() {
        if positions == nil, live > Self.indexThreshold { buildIndex() }
    }

    func contains(_ opaque: UnsafeMutableRawPointer) -> Bool {
        indexIfLong()
        if let positions { return positions[opaque] != nil }
        return position(of: opaque) != nil
    }

    func remove(_ opaque: UnsafeMutableRawPointer) -> Bool {
        indexIfLong()
        let found: Int?
        if positions != nil {
            found = positions?.removeValue(forKey: opaque)
        } else {
            found = position(of: opaque)
        }
        guard let index = found else { return false }
        entries[index] = nil
        live -= 1
        while start < entries.count, entries[start] == nil { start += 1 }
        if start > 32, start * 2 > entries.count {
            compact()
        } else if entries.count > 64, live * 4 < entries.count {
            // Holes in the middle (removal in another order): compacting
            // after three quarters are gone keeps removal O(1) amortized.
            compact()
        }
        return true
    }

    func forEach(_ body: (Unmanaged<Operation>) -> Void) {
        var index = start
        while index < entries.count {
            if let entry = entries[index] { body(Unmanaged.fromOpaque(entry)) }
            index += 1
        }
    }

    private func position(of opaque: UnsafeMutableRawPointer) -> Int? {
        var index = start
        while index < entries.count {
            if entries[index] == opaque { return index }
            index += 1
        }
        return nil
    }

    /// Drops the holes (and rebuilds the index, if there is one).
    private func compact() {
        entries.removeAll { $0 == nil }
        start = 0
        if positions != nil { buildIndex() }
    }

    private func buildIndex() {
        var index: [UnsafeMutableRawPointer: Int] = [:]
        index.reserveCapacity(entries.count * 2)
        for (offset, entry) in entries.enumerated() {
            if let entry { index[entry] = offset }
        }
        positions = index
    }
}
