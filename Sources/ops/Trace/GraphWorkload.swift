import Operations
import Synchronization

/// Small dependency graphs to trace (`ops trace`) and draw (`ops graph`).
/// Each operation's body spins for 50 to 400 µs, so that it shows as a bar.
enum GraphWorkload: String, CaseIterable {
    /// a → (b, c) → d: the smallest graph with parallel work and a join.
    case diamond
    /// Each operation depends on the previous one.
    case chain
    /// One root, `size` middles that depend on it, one sink that depends on all.
    case fanOut = "fan-out"
    /// A pipeline of stages: download → decode → (resize, thumbnail) → store, per item.
    case pipeline
    /// Each operation depends on up to three earlier ones, chosen by `--seed`.
    case dag
    /// a → b → c → a: a kept dependency cycle (Foundation's semantics); the
    /// trace run breaks it by cancelling one member.
    case cycle

    static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }

    /// Sizes and seeds from the command line.
    struct Parameters: Sendable {
        var size = 64
        var width = OperationQueue.defaultMaxConcurrentOperationCount
        var seed: UInt64 = 7

        init() {}

        init(_ arguments: ParsedArguments) throws(UsageError) {
            if let size = try arguments.integer("size", as: Int.self) {
                guard (1...100_000).contains(size) else { throw UsageError("--size must be from 1 to 100000; got \(size).") }
                self.size = size
            }
            if let width = try arguments.integer("width", as: Int.self) {
                guard width == -1 || width >= 1 else { throw UsageError("--width must be -1 or at least 1; got \(width).") }
                self.width = width
            }
            if let seed = try arguments.integer("seed", as: UInt64.self) { self.seed = seed }
        }
    }

    /// Builds the operations (not added to any queue). Each records its run
    /// in `ran` (if given) by its index.
    func build(_ parameters: Parameters, ran: RunLedger? = nil) -> [Operation] {
        var operations: [BlockOperation] = []
        func make(_ name: String) -> BlockOperation {
            let index = operations.count
            let operation = BlockOperation {
                Self.spin(microseconds: 50 + (index &* 7_919) % 350)
                ran?.record(index)
            }
            operation.name = name
            operations.append(operation)
            return operation
        }
        let size = parameters.size
        switch self {
        case .diamond:
            let a = make("a"), b = make("b"), c = make("c"), d = make("d")
            b.addDependency(a)
            c.addDependency(a)
            d.addDependency(b)
            d.addDependency(c)
        case .chain:
            var previous: Operation?
            for index in 0..<size {
                let next = make("link \(index)")
                if let previous { next.addDependency(previous) }
                previous = next
            }
        case .fanOut:
            let root = make("root")
            let middles = (0..<max(1, size - 2)).map { index -> Operation in
                let middle = make("middle \(index)")
                middle.addDependency(root)
                return middle
            }
            let sink = make("sink")
            for middle in middles { sink.addDependency(middle) }
        case .pipeline:
            for item in 0..<max(1, size / 5) {
                let download = make("download \(item)")
                let decode = make("decode \(item)")
                let resize = make("resize \(item)")
                let thumbnail = make("thumbnail \(item)")
                let store = make("store \(item)")
                decode.addDependency(download)
                resize.addDependency(decode)
                thumbnail.addDependency(decode)
                store.addDependency(resize)
                store.addDependency(thumbnail)
            }
        case .dag:
            var random = parameters.seed | 1
            for index in 0..<size {
                let operation = make("node \(index)")
                guard index > 0 else { continue }
                var chosen: Set<Int> = []
                for _ in 0..<3 {
                    random ^= random << 13
                    random ^= random >> 7
                    random ^= random << 17
                    chosen.insert(Int(random % UInt64(index)))
                }
                for dependency in chosen.sorted() { operation.addDependency(operations[dependency]) }
            }
        case .cycle:
            let a = make("a"), b = make("b"), c = make("c"), after = make("after the cycle")
            a.addDependency(b)
            b.addDependency(c)
            c.addDependency(a)
            after.addDependency(a)
        }
        return operations
    }

    /// Runs the workload on a queue of the given width and checks that every
    /// operation ran once, after its dependencies. Returns whether it did.
    func run(_ parameters: Parameters) -> Bool {
        let ledger = RunLedger()
        let operations = build(parameters, ran: ledger)
        let queue = OperationQueue()
        queue.name = "ops trace \(rawValue)"
        queue.maxConcurrentOperationCount = parameters.width
        queue.addOperations(operations, waitUntilFinished: false)
        if self == .cycle {
            // Kept, as in Foundation: nothing on it runs until a member is cancelled.
            operations[2].cancel()
        }
        guard queue.waitUntilAllOperationsAreFinished(timeout: .seconds(120)) else {
            Console.error("trace: '\(rawValue)' did not finish within 120 s:\n\(queue.diagnostics())\n")
            return false
        }
        let order = ledger.order
        var position: [Int: Int] = [:]
        for (rank, index) in order.enumerated() { position[index] = rank }
        // Each operation's index, so that checking an edge is a lookup
        // (a search per edge made the check quadratic: 100,000 operations
        // took minutes in a debug build).
        var indexOf: [ObjectIdentifier: Int] = [:]
        indexOf.reserveCapacity(operations.count)
        for (index, operation) in operations.enumerated() { indexOf[ObjectIdentifier(operation)] = index }
        for (index, operation) in operations.enumerated() where !operation.isCancelled {
            guard let rank = position[index] else { return false }
            for dependency in operation.dependencies where !dependency.isCancelled {
                guard let other = indexOf[ObjectIdentifier(dependency)], let before = position[other], before < rank else {
                    return false
                }
            }
        }
        return order.count == Set(order).count
    }

    private static func spin(microseconds: Int) {
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: .microseconds(microseconds))
        while clock.now < end {}
    }
}

/// The order in which a workload's operations ran.
final class RunLedger: Sendable {
    private let storage = Mutex<[Int]>([])

    func record(_ index: Int) {
        storage.withLock { $0.append(index) }
    }

    var order: [Int] { storage.withLock { $0 } }
}
