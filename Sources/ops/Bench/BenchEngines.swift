import BenchFoundation
import BenchOperations

/// The three engines' workloads behind one interface. `OperationsEngine`
/// and `FoundationEngine` are the same source (Sources/BenchOperations/
/// Workloads.swift) compiled against this library and against Foundation;
/// `DispatchEngine` (BenchDispatch.swift) is the hand-written lower bound.
/// Each method runs a workload once and returns its timed nanoseconds,
/// validation failures and metrics; see Workloads.swift for what is timed.
protocol BenchEngine {
    static var engineName: String { get }
    /// W0: create an operation and `start()` it by hand.
    static func createAndStart(count: Int) -> BenchRunResult
    /// W1 (one by one, then wait) and W2 (`batched`: one `addOperations` call that waits).
    static func independent(count: Int, width: Int, batched: Bool) -> BenchRunResult
    /// W3: a chain.
    static func chain(count: Int) -> BenchRunResult
    /// W4: root, `count` middles, sink.
    static func fanOutFanIn(count: Int) -> BenchRunResult
    /// W5: a seeded random DAG.
    static func randomGraph(count: Int, seed: UInt64) -> BenchRunResult
    /// W6: cancel a suspended queue, resume, wait.
    static func cancelSuspended(count: Int) -> BenchRunResult
    /// W7: random priorities on a suspended serial queue.
    static func priorities(count: Int, seed: UInt64) -> BenchRunResult
    /// W8: resident memory per pending operation.
    static func pendingMemory(count: Int) -> BenchRunResult
    /// W1a: W1 with `async` bodies; nil when the engine has none (Foundation).
    static func independentAsync(count: Int) -> BenchRunResult?
    /// W9: `count` operations over `queues` serial queues, added by `producers` threads.
    static func serialQueues(count: Int, queues: Int, producers: Int) -> BenchRunResult
    /// W10: `count` operations that each block for `sleepMicroseconds`; thread counts
    /// sampled during the run and after `idleSeconds` idle.
    static func blocking(count: Int, sleepMicroseconds: Int, idleSeconds: Double) -> BenchRunResult
}

extension OperationsEngine: BenchEngine {}
extension FoundationEngine: BenchEngine {}

/// Which engine a row runs, in table order.
enum BenchEngineID: CaseIterable, Hashable, Sendable {
    case operations
    case foundation
    case dispatch

    var engine: any BenchEngine.Type {
        switch self {
        case .operations: OperationsEngine.self
        case .foundation: FoundationEngine.self
        case .dispatch: DispatchEngine.self
        }
    }

    var name: String { engine.engineName }
}

/// A workload with its fixed parameters.
enum BenchWorkload: Sendable {
    case createAndStart
    case independent(width: Int, batched: Bool)
    /// W1 with `async` operation bodies.
    case independentAsync
    case chain
    case fanOutFanIn
    case randomGraph
    case cancelSuspended
    case priorities
    case pendingMemory
    /// W9: `queues` serial queues fed by `producers` threads.
    case serialQueues(queues: Int, producers: Int)
    /// W10: operations that block for `sleepMicroseconds`; threads counted
    /// again after `idleSeconds`.
    case blocking(sleepMicroseconds: Int, idleSeconds: Double)

    /// Runs the workload once on `engine`, or returns nil if the engine
    /// cannot run it.
    func run(on engine: any BenchEngine.Type, count: Int, seed: UInt64) -> BenchRunResult? {
        switch self {
        case .createAndStart: engine.createAndStart(count: count)
        case .independent(let width, let batched): engine.independent(count: count, width: width, batched: batched)
        case .independentAsync: engine.independentAsync(count: count)
        case .chain: engine.chain(count: count)
        case .fanOutFanIn: engine.fanOutFanIn(count: count)
        case .randomGraph: engine.randomGraph(count: count, seed: seed)
        case .cancelSuspended: engine.cancelSuspended(count: count)
        case .priorities: engine.priorities(count: count, seed: seed)
        case .pendingMemory: engine.pendingMemory(count: count)
        case .serialQueues(let queues, let producers):
            engine.serialQueues(count: count, queues: queues, producers: producers)
        case .blocking(let sleepMicroseconds, let idleSeconds):
            engine.blocking(count: count, sleepMicroseconds: sleepMicroseconds, idleSeconds: idleSeconds)
        }
    }
}
