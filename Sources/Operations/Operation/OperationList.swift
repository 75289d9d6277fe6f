/// A list of operations that stores zero or one element without allocating.
///
/// Most operations have at most one dependency and at most one dependent
/// (chains, fan-out leaves), so the common case costs no array allocation.
/// Order is insertion order. Not thread-safe: the owner's lock guards it.
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
            self = .empty  // release the array's other reference before mutating
            list.append(operation)
            self = .many(list)
        }
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
/// A dependent holds its dependencies strongly (`dependencies`, as in
/// Foundation); this reverse edge must not, or a graph that is built and
/// never run would be a reference cycle and leak. It is not `weak` either:
/// a weak reference gives its target a side table, which sends every later
/// retain and release of that operation down the runtime's slow path (about
/// 40% of the cost of a dependency chain, measured).
///
/// Safety protocol (see `Operation.deinit` and `Operation.finish`):
/// - An entry is added and removed only while the dependency's state lock
///   bit is held.
/// - A dependent that is deallocated while one of its dependencies has not
///   retired removes its entry first, under that dependency's lock; so while
///   the dependency holds its own lock, every entry points to an operation
///   whose memory is valid (possibly one that is being deinitialized).
/// - Code holding the lock may touch an entry's state word, but may retain
///   it only when it is known alive (pending and owned by a queue), or
///   through a weak probe (`Operation.probe`), which yields nil for an
///   operation being deinitialized.
///
/// Removal leaves a hole; holes are skipped and compacted away, so tearing
/// down a graph in order costs O(1) per dependent. Not thread-safe: the
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

    /// Whether `operation` has an entry. O(n).
    func contains(_ operation: Operation) -> Bool {
        let opaque = Unmanaged.passUnretained(operation).toOpaque()
        var found = false
        forEach { if $0.toOpaque() == opaque { found = true } }
        return found
    }

    /// - Complexity: amortized O(1).
    mutating func append(_ operation: Operation) {
        let entry = Unmanaged.passUnretained(operation)
        switch self {
        case .empty:
            self = .one(entry)
        case .one(let only):
            self = .many(DependentArray([only, entry]))
        case .many(let array):
            array.append(entry)
        }
    }

    /// Removes `operation`'s entry. Returns whether it was present.
    /// - Complexity: O(1) amortized when entries are removed in the order
    ///   they were added; O(n) at worst.
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
    /// the owner's lock held; see the safety protocol above.
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

/// The storage of a `DependentList` with more than one entry.
final class DependentArray {
    private var entries: [Unmanaged<Operation>?]
    /// Index of the first entry that may be live.
    private var start = 0
    private(set) var live: Int

    init(_ initial: [Unmanaged<Operation>]) {
        entries = []
        entries.reserveCapacity(max(4, initial.count))
        entries.append(contentsOf: initial.map { Optional($0) })
        live = initial.count
    }

    func append(_ entry: Unmanaged<Operation>) {
        entries.append(entry)
        live += 1
    }

    func remove(_ opaque: UnsafeMutableRawPointer) -> Bool {
        var index = start
        while index < entries.count {
            if entries[index]?.toOpaque() == opaque {
                entries[index] = nil
                live -= 1
                while start < entries.count, entries[start] == nil { start += 1 }
                if start > 32, start * 2 > entries.count {
                    entries.removeFirst(start)
                    start = 0
                }
                return true
            }
            index += 1
        }
        return false
    }

    func forEach(_ body: (Unmanaged<Operation>) -> Void) {
        var index = start
        while index < entries.count {
            if let entry = entries[index] { body(entry) }
            index += 1
        }
    }
}
