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
            self = .many([only, operation])
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

/// The operations waiting for one operation to finish, held weakly.
///
/// A dependent holds its dependencies strongly (`dependencies`, as in
/// Foundation); the reverse edge is weak, so a graph that is built and never
/// run has no reference cycle and is released like any other object graph.
/// A dependent that is released before its dependency finishes simply leaves
/// a cleared slot behind. Not thread-safe: the owner's lock guards it.
enum DependentList {
    struct Slot {
        weak var operation: Operation?
    }

    case empty
    case one(Slot)
    case many([Slot])

    var isEmpty: Bool {
        if case .empty = self { return true }
        return false
    }

    /// - Complexity: amortized O(1).
    mutating func append(_ operation: Operation) {
        let slot = Slot(operation: operation)
        switch self {
        case .empty:
            self = .one(slot)
        case .one(let only):
            self = .many([only, slot])
        case .many(var list):
            self = .empty
            list.append(slot)
            self = .many(list)
        }
    }

    /// Removes `operation`'s slot. Returns whether it was present.
    /// - Complexity: O(n).
    @discardableResult
    mutating func remove(_ operation: Operation) -> Bool {
        switch self {
        case .empty:
            return false
        case .one(let only):
            guard only.operation === operation else { return false }
            self = .empty
            return true
        case .many(var list):
            guard let index = list.firstIndex(where: { $0.operation === operation }) else { return false }
            self = .empty
            list.remove(at: index)
            self = list.count == 1 ? .one(list[0]) : .many(list)
            return true
        }
    }

    /// The dependents still alive.
    var operations: [Operation] {
        switch self {
        case .empty: return []
        case .one(let only): return only.operation.map { [$0] } ?? []
        case .many(let list): return list.compactMap(\.operation)
        }
    }

    /// Moves the live dependents out, leaving the list empty.
    mutating func take() -> OperationList {
        defer { self = .empty }
        switch self {
        case .empty: return .empty
        case .one(let only): return only.operation.map { .one($0) } ?? .empty
        case .many(let list):
            let live = list.compactMap(\.operation)
            return live.isEmpty ? .empty : (live.count == 1 ? .one(live[0]) : .many(live))
        }
    }
}
