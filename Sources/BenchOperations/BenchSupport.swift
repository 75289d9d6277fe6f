// Shared by three targets through symlinks: BenchOperations (this file),
// BenchFoundation/BenchSupport.swift and ops/Bench/BenchSupport.swift (the
// Dispatch anchors). Everything here is internal, so each module gets its own
// copy and the names never clash; the code is identical, so every engine
// records, generates and validates in exactly the same way.
import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Monotonic time in nanoseconds.
@inline(__always)
func benchNow() -> UInt64 {
    DispatchTime.now().uptimeNanoseconds
}

/// What one run of a workload reports: the timed nanoseconds, validation
/// failures (empty when every operation ran and every ordering held) and
/// workload-specific numbers (priority inversions, bytes per operation, …).
typealias BenchRunResult = (nanoseconds: UInt64, failures: [String], metrics: [String: Double])

/// Gives every operation of a run a sequence number: the body of operation
/// `index` calls `record(index)`, which takes the next number from one shared
/// atomic counter and stores it in slot `index`. Afterwards the slots tell
/// whether each operation ran exactly once and in which order.
final class BenchRecorder: @unchecked Sendable {
    // @unchecked Sendable: `counter` is atomic. Slot `i` of `slots` is written
    // only by the operation with index `i`, and read only after the engine's
    // wait returned, which orders those writes before the reads. Sequence
    // numbers come from read-modify-writes of one atomic, so an operation that
    // starts after another finished (a dependency edge, a serial queue) always
    // draws a larger number, even with relaxed ordering.
    let count: Int
    let counter = Atomic<Int>(0)
    private let slots: UnsafeMutablePointer<Int>

    init(count: Int) {
        self.count = count
        slots = .allocate(capacity: max(count, 1))
        slots.initialize(repeating: 0, count: max(count, 1))
    }

    deinit {
        slots.deallocate()
    }

    /// The body of every benchmark operation.
    @inline(__always)
    func record(_ index: Int) {
        slots[index] = counter.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// The sequence number of operation `index` (1-based), or 0 if it never ran.
    @inline(__always)
    func sequence(_ index: Int) -> Int {
        slots[index]
    }

    /// Failures unless every operation ran exactly once.
    func checkEachRanOnce() -> [String] {
        let total = counter.load(ordering: .acquiring)
        var missing = 0
        var firstMissing = -1
        for index in 0..<count where slots[index] == 0 {
            if firstMissing < 0 { firstMissing = index }
            missing += 1
        }
        var failures: [String] = []
        if total != count {
            failures.append("\(total) bodies ran, expected \(count)")
        }
        if missing > 0 {
            failures.append("\(missing) of \(count) operations never ran (first: #\(firstMissing))")
        }
        return failures
    }

    /// Failures unless operation `i` ran `i`-th (FIFO on a serial queue, a chain).
    func checkRanInIndexOrder() -> [String] {
        var violations = 0
        var first = -1
        for index in 0..<count where slots[index] != index + 1 {
            if first < 0 { first = index }
            violations += 1
        }
        guard violations > 0 else { return [] }
        return ["\(violations) operations out of order (first: #\(first) ran \(slots[first])-th)"]
    }

    /// Failures unless no body ran at all (a cancelled queue).
    func checkNoneRan() -> [String] {
        let total = counter.load(ordering: .acquiring)
        return total == 0 ? [] : ["\(total) cancelled operations ran their body, expected 0"]
    }

    /// The indices in the order they ran. Call after `checkEachRanOnce()` passed.
    func executionOrder() -> [Int] {
        var order = [Int](repeating: -1, count: count)
        for index in 0..<count {
            let position = slots[index] - 1
            if position >= 0, position < count { order[position] = index }
        }
        return order
    }
}

/// SplitMix64: a small, fast, seeded generator, identical in every engine.
struct BenchRandom: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in `0 ..< bound` (bound > 0); the tiny modulo bias is irrelevant here.
    mutating func below(_ bound: Int) -> Int {
        Int(next() % UInt64(bound))
    }
}

/// A random directed acyclic graph: operation `i` depends on 0 to 4 distinct
/// operations chosen uniformly among `0 ..< i`. Stored compactly: the
/// dependencies of `i` are `targets[offsets[i] ..< offsets[i + 1]]`.
struct BenchGraph {
    let count: Int
    let offsets: [Int]
    let targets: [Int]

    static func random(count: Int, seed: UInt64) -> BenchGraph {
        var random = BenchRandom(seed: seed)
        var offsets = [Int]()
        offsets.reserveCapacity(count + 1)
        var targets = [Int]()
        targets.reserveCapacity(count * 2)
        offsets.append(0)
        for index in 0..<count {
            let wanted = min(random.below(5), index)
            let start = targets.count
            while targets.count - start < wanted {
                let candidate = random.below(index)
                if !targets[start...].contains(candidate) { targets.append(candidate) }
            }
            offsets.append(targets.count)
        }
        return BenchGraph(count: count, offsets: offsets, targets: targets)
    }

    var edgeCount: Int { targets.count }

    /// Failures unless every operation ran after all of its dependencies.
    func checkOrder(_ recorder: BenchRecorder) -> [String] {
        var violations = 0
        var example = ""
        for index in 0..<count {
            let sequence = recorder.sequence(index)
            for edge in offsets[index]..<offsets[index + 1] where recorder.sequence(targets[edge]) >= sequence {
                if violations == 0 { example = " (first: #\(index) ran before its dependency #\(targets[edge]))" }
                violations += 1
            }
        }
        return violations == 0 ? [] : ["\(violations) dependency edges violated\(example)"]
    }
}

/// Priorities for the priority workload: the five `queuePriority` raw values
/// (-8, -4, 0, 4, 8), drawn uniformly from a seeded generator.
func benchPriorities(count: Int, seed: UInt64) -> [Int] {
    var random = BenchRandom(seed: seed)
    let levels = [-8, -4, 0, 4, 8]
    return (0..<count).map { _ in levels[random.below(5)] }
}

/// Order violations of a run where all `priorities.count` operations were
/// ready together on a serial queue:
/// - `inversions`: operations that started while an operation of higher
///   priority was still waiting;
/// - `fifo`: operations that started before an operation of the same
///   priority that was added earlier.
func benchPriorityViolations(order: [Int], priorities: [Int]) -> (inversions: Int, fifo: Int) {
    func level(_ priority: Int) -> Int { (priority + 8) / 4 }
    var waiting = [Int](repeating: 0, count: 5)
    for priority in priorities { waiting[level(priority)] += 1 }
    var lastStarted = [Int](repeating: -1, count: 5)
    var inversions = 0
    var fifo = 0
    for index in order where index >= 0 {
        let current = level(priorities[index])
        waiting[current] -= 1
        if waiting[(current + 1)...].contains(where: { $0 > 0 }) { inversions += 1 }
        if index < lastStarted[current] { fifo += 1 }
        lastStarted[current] = max(lastStarted[current], index)
    }
    return (inversions, fifo)
}

/// Process memory, for the pending-memory workload.
enum BenchMemory {
    /// Resident set size from `/proc/self/statm` (resident pages × page size), or 0.
    static func residentBytes() -> Int {
        #if os(Linux)
        let descriptor = open("/proc/self/statm", O_RDONLY)
        guard descriptor >= 0 else { return 0 }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let length = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 127) }
        guard length > 0 else { return 0 }
        // "size resident shared text lib data dt": take the second field.
        var field = 0
        var value = 0
        for byte in buffer[0..<length] {
            if byte == UInt8(ascii: " ") {
                field += 1
                if field > 1 { break }
                continue
            }
            if field == 1, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
        }
        return value * Int(sysconf(Int32(_SC_PAGESIZE)))
        #else
        return 0
        #endif
    }

    /// Returns free heap pages to the kernel (glibc's `malloc_trim(0)`, found
    /// at run time because Swift's Glibc module does not export `malloc.h`),
    /// so that memory allocated next shows up in the resident set size
    /// instead of silently reusing pages that are already resident.
    static func trim() {
        #if os(Linux) && canImport(Glibc)
        typealias MallocTrim = @convention(c) (Int) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return }
        _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
        #endif
    }

    /// A snapshot taken right before the measured allocations.
    static func snapshot() -> Int {
        trim()
        return residentBytes()
    }

    /// Per-item metrics for the allocations made since `before`.
    static func metrics(since before: Int, count: Int) -> [String: Double] {
        ["rssBytesPerOp": Double(residentBytes() - before) / Double(max(count, 1))]
    }
}
