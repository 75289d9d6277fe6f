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
        let buffer = benchReadProcFile("/proc/self/statm", capacity: 128)
        // "size resident shared text lib data dt": take the second field.
        var field = 0
        var value = 0
        for byte in buffer {
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

// MARK: Threads (W9 producers, W10 thread counts)

/// A joinable thread running `body`, for producers and samplers that must
/// not take a thread from the pool being measured.
struct BenchThread {
    private final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    #if canImport(Darwin)
    private let thread: pthread_t?
    #else
    private let thread: pthread_t
    #endif

    init(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        #if canImport(Darwin)
        var thread: pthread_t?
        #else
        var thread = pthread_t()
        #endif
        let status = pthread_create(&thread, nil, { argument in
            guard let argument else { return nil }
            Unmanaged<Box>.fromOpaque(argument).takeRetainedValue().body()
            return nil
        }, box)
        precondition(status == 0, "ops bench: could not start a thread (\(status))")
        self.thread = thread
    }

    /// Waits until the thread has returned.
    func join() {
        #if canImport(Darwin)
        if let thread { pthread_join(thread, nil) }
        #else
        pthread_join(thread, nil)
        #endif
    }
}

/// Blocks the calling thread for `microseconds` (W10's operation body).
func benchSleep(microseconds: Int) {
    usleep(UInt32(microseconds))
}

/// The first `capacity` bytes of a small file such as one in `/proc`, or
/// none if it cannot be read.
func benchReadProcFile(_ path: String, capacity: Int) -> [UInt8] {
    let descriptor = open(path, O_RDONLY)
    guard descriptor >= 0 else { return [] }
    defer { close(descriptor) }
    var buffer = [UInt8](repeating: 0, count: capacity)
    let length = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, capacity) }
    return length > 0 ? Array(buffer[0..<length]) : []
}

/// The process's thread count and its peak during a run (W10).
enum BenchThreads {
    /// The `Threads:` field of `/proc/self/status`, or 0 where there is none.
    static func count() -> Int {
        #if os(Linux)
        let buffer = benchReadProcFile("/proc/self/status", capacity: 4_096)
        let length = buffer.count
        // Lines are "Name:\tvalue"; find the line starting "Threads:".
        let key = Array("Threads:".utf8)
        var lineStart = 0
        while lineStart + key.count <= length {
            if buffer[lineStart..<(lineStart + key.count)].elementsEqual(key) {
                var value = 0
                var position = lineStart + key.count
                while position < length, buffer[position] != UInt8(ascii: "\n") {
                    let byte = buffer[position]
                    if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                        value = value * 10 + Int(byte - UInt8(ascii: "0"))
                    }
                    position += 1
                }
                return value
            }
            while lineStart < length, buffer[lineStart] != UInt8(ascii: "\n") { lineStart += 1 }
            lineStart += 1
        }
        return 0
        #else
        return 0
        #endif
    }
}

/// Samples the process's thread count about every millisecond on a thread
/// of its own, from `init` until `stop()`. The sampler's own thread is not
/// counted in the figures it reports.
final class BenchThreadSampler: @unchecked Sendable {
    // @unchecked Sendable: `peak` and `running` are atomics; `thread` is
    // set in `init` and read only by the thread that called `init`.
    /// Threads when the sampler was created (before its own thread existed).
    let before: Int
    private let peak: Atomic<Int>
    private let running = Atomic<Bool>(true)
    private var thread: BenchThread?

    init() {
        before = BenchThreads.count()
        peak = Atomic(before)
        thread = BenchThread { [self] in
            while running.load(ordering: .relaxed) {
                // Minus this sampling thread.
                let now = BenchThreads.count() - 1
                if now > peak.load(ordering: .relaxed) { peak.store(now, ordering: .relaxed) }
                usleep(1_000)
            }
        }
    }

    /// Stops sampling and returns the peak thread count seen (at least the
    /// count before).
    func stop() -> Int {
        running.store(false, ordering: .relaxed)
        thread?.join()
        thread = nil
        return peak.load(ordering: .relaxed)
    }

    /// Stops sampling, waits `idleSeconds` with nothing to run, and returns
    /// the metrics of W10: `threadsBefore`, `threadsPeak`, `threadsAfterIdle`
    /// and `idleSeconds`.
    func finish(idleSeconds: Double) -> [String: Double] {
        let peak = stop()
        usleep(UInt32(idleSeconds * 1_000_000))
        let after = BenchThreads.count()
        return [
            "threadsBefore": Double(before),
            "threadsPeak": Double(peak),
            "threadsAfterIdle": Double(after),
            "idleSeconds": idleSeconds,
        ]
    }
}

/// Counts operation bodies running at once, and the most at any moment (W10).
final class BenchConcurrency: Sendable {
    private let running = Atomic<Int>(0)
    private let most = Atomic<Int>(0)

    @inline(__always)
    func enter() {
        let now = running.wrappingAdd(1, ordering: .relaxed).newValue
        var seen = most.load(ordering: .relaxed)
        while now > seen {
            let exchange = most.compareExchange(expected: seen, desired: now, ordering: .relaxed)
            if exchange.exchanged { break }
            seen = exchange.original
        }
    }

    @inline(__always)
    func leave() {
        running.wrappingSubtract(1, ordering: .relaxed)
    }

    /// The most bodies that ran at once.
    var peak: Int { most.load(ordering: .relaxed) }
}

/// One W10 run, shared by the engines: the body each operation or block
/// runs, and the figures once they all ran. Create it right before the
/// timed region (it starts sampling the thread count).
final class BenchBlockingRun: Sendable {
    let recorder: BenchRecorder
    private let sleepMicroseconds: Int
    private let concurrency = BenchConcurrency()
    private let sampler = BenchThreadSampler()

    init(count: Int, sleepMicroseconds: Int) {
        recorder = BenchRecorder(count: count)
        self.sleepMicroseconds = sleepMicroseconds
    }

    /// The body of operation `index`: blocks, and counts the bodies running.
    func body(_ index: Int) {
        concurrency.enter()
        benchSleep(microseconds: sleepMicroseconds)
        recorder.record(index)
        concurrency.leave()
    }

    /// The failures and metrics of a run that took `nanoseconds`, after the
    /// idle wait (see `BenchThreadSampler.finish`).
    func result(nanoseconds: UInt64, idleSeconds: Double) -> BenchRunResult {
        var metrics = sampler.finish(idleSeconds: idleSeconds)
        metrics["concurrentPeak"] = Double(concurrency.peak)
        return (nanoseconds, recorder.checkEachRanOnce(), metrics)
    }
}

// MARK: Many serial queues (W9)

/// The bookkeeping of W9: `queues` serial queues, each fed `perQueue`
/// operations, `perQueue / producers` by each of `producers` threads.
/// Operation (queue `q`, producer `p`, round `r`) has index
/// `q * perQueue + p * perProducer + r`; producer `p` adds its rounds in
/// order, each round to every queue in turn.
///
/// Each body calls `run(queue:index:recorder:)`, which detects two bodies of
/// one queue running at once, records the operation's sequence number, and
/// stamps the time the queue's last operation ran. After the run,
/// `check(_:)` validates each queue's per-producer FIFO order and
/// `metrics(start:)` gives the spread of the queues' finish times.
final class BenchSerialQueues: @unchecked Sendable {
    // @unchecked Sendable: `active` and `ran` hold one atomic per queue;
    // `finished[q]` is written only by the body that makes `ran[q]` reach
    // `perQueue` (one per queue), and read after the engine's wait returned.
    let queues: Int
    let perQueue: Int
    let producers: Int
    let perProducer: Int
    private let active: UnsafeMutablePointer<Atomic<Int>>
    private let ran: UnsafeMutablePointer<Atomic<Int>>
    private let finished: UnsafeMutablePointer<UInt64>
    private let overlaps = Atomic<Int>(0)

    init(queues: Int, perQueue: Int, producers: Int) {
        precondition(queues > 0 && producers > 0 && perQueue % producers == 0,
                     "ops bench: operations per queue must be a multiple of the producers")
        self.queues = queues
        self.perQueue = perQueue
        self.producers = producers
        perProducer = perQueue / producers
        active = .allocate(capacity: queues)
        ran = .allocate(capacity: queues)
        finished = .allocate(capacity: queues)
        for queue in 0..<queues {
            (active + queue).initialize(to: Atomic(0))
            (ran + queue).initialize(to: Atomic(0))
        }
        finished.initialize(repeating: 0, count: queues)
    }

    deinit {
        active.deinitialize(count: queues)
        ran.deinitialize(count: queues)
        active.deallocate()
        ran.deallocate()
        finished.deallocate()
    }

    var count: Int { queues * perQueue }

    @inline(__always)
    func index(queue: Int, producer: Int, round: Int) -> Int {
        queue * perQueue + producer * perProducer + round
    }

    /// The body of every W9 operation.
    @inline(__always)
    func run(queue: Int, index: Int, recorder: BenchRecorder) {
        // Read-modify-writes of one atomic are totally ordered, so a body
        // that starts after the previous one of its queue left sees 1 here.
        if active[queue].wrappingAdd(1, ordering: .relaxed).newValue != 1 {
            overlaps.wrappingAdd(1, ordering: .relaxed)
        }
        recorder.record(index)
        if ran[queue].wrappingAdd(1, ordering: .relaxed).newValue == perQueue {
            finished[queue] = benchNow()
        }
        active[queue].wrappingSubtract(1, ordering: .relaxed)
    }

    /// Failures unless every operation ran once, no queue ran two bodies at
    /// once, and each producer's operations on each queue ran in the order
    /// the producer added them.
    func check(_ recorder: BenchRecorder) -> [String] {
        var failures = recorder.checkEachRanOnce()
        let overlapping = overlaps.load(ordering: .acquiring)
        if overlapping > 0 {
            failures.append("\(overlapping) operations started while another of their serial queue was running")
        }
        guard failures.isEmpty else { return failures }
        var violations = 0
        var example = ""
        for queue in 0..<queues {
            for producer in 0..<producers {
                for round in 1..<max(perProducer, 1) {
                    let earlier = recorder.sequence(index(queue: queue, producer: producer, round: round - 1))
                    if recorder.sequence(index(queue: queue, producer: producer, round: round)) < earlier {
                        if violations == 0 {
                            example = " (first: queue \(queue), producer \(producer), round \(round) ran before round \(round - 1))"
                        }
                        violations += 1
                    }
                }
            }
        }
        if violations > 0 { failures.append("\(violations) per-producer FIFO violations\(example)") }
        return failures
    }

    /// The spread of the queues' finish times (when each ran its last
    /// operation), in nanoseconds since `start`: `finishMinNs`,
    /// `finishMedianNs`, `finishMaxNs`, and `finishMaxOverMedian`.
    func metrics(start: UInt64) -> [String: Double] {
        var times = (0..<queues).map { Double(finished[$0] &- start) }
        times.sort()
        let median = times.count % 2 == 1
            ? times[times.count / 2] : (times[times.count / 2 - 1] + times[times.count / 2]) / 2
        return [
            "finishMinNs": times.first ?? 0,
            "finishMedianNs": median,
            "finishMaxNs": times.last ?? 0,
            "finishMaxOverMedian": median > 0 ? (times.last ?? 0) / median : 0,
        ]
    }
}

/// Releases `count` waiting threads at once (W9's producers start together
/// when the timed region starts).
final class BenchGate: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let count: Int

    init(count: Int) {
        self.count = count
    }

    func wait() {
        semaphore.wait()
    }

    func open() {
        for _ in 0..<count { semaphore.signal() }
    }
}
