import Synchronization
import Testing
@testable import Operations

/// How a finishing operation releases its dependents, for every shape the
/// finish path treats differently: none, one (held by the finish plan
/// itself), several, and a list long enough to be indexed when searched.
@Suite("graph release")
struct GraphReleaseTests {
    @Test("a plain operation releases every dependent, whatever their number", arguments: [0, 1, 2, 3, 5, 40, 300])
    func plainOperationReleasesAll(count: Int) {
        let queue = OperationQueue()
        let ran = Atomic<Int>(0)
        let root = BlockOperation { ran.add(1, ordering: .relaxed) }
        let dependents = (0..<count).map { _ in
            let dependent = BlockOperation { ran.add(1, ordering: .relaxed) }
            dependent.addDependency(root)
            return dependent
        }
        queue.addOperations(dependents + [root], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(20)), "\(count) dependents of a plain operation were not all released")
        #expect(ran.load(ordering: .relaxed) == count + 1)
        #expect(dependents.allSatisfy { $0.isFinished })
    }

    @Test("an operation started by hand releases every dependent in a queue", arguments: [1, 2, 40])
    func startedByHandReleasesAll(count: Int) {
        let queue = OperationQueue()
        let root = BlockOperation {}
        let dependents = (0..<count).map { _ in
            let dependent = BlockOperation {}
            dependent.addDependency(root)
            return dependent
        }
        queue.addOperations(dependents, waitUntilFinished: false)
        root.start()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(20)))
        #expect(dependents.allSatisfy { $0.isFinished })
    }

    @Test("a long dependents list stays correct when dependents leave it in any order")
    func longListRemovals() {
        let root = BlockOperation {}
        var dependents: [BlockOperation] = (0..<200).map { _ in
            let dependent = BlockOperation {}
            dependent.addDependency(root)
            return dependent
        }
        // Remove every third edge, from the back: holes in the middle of the
        // list, then a search that indexes it.
        var kept: [BlockOperation] = []
        for (index, dependent) in dependents.enumerated().reversed() {
            if index % 3 == 0 { dependent.removeDependency(root) } else { kept.append(dependent) }
        }
        #expect(dependents.filter { $0.dependencies.isEmpty }.count == 67)
        // Duplicate edges are still refused once the list is long.
        kept[0].addDependency(root)
        #expect(kept[0].dependencies.count == 1)
        dependents.removeAll()
        let queue = OperationQueue()
        queue.addOperations(kept, waitUntilFinished: false)
        #expect(kept.allSatisfy { !$0.isReady })
        queue.addOperation(root)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(20)))
        #expect(kept.allSatisfy { $0.isFinished })
    }

    @Test("a fan-in starts only after every one of its dependencies finished", arguments: [2, 3, 50])
    func fanInWaitsForAll(count: Int) {
        let queue = OperationQueue()
        let finished = Atomic<Int>(0)
        let seenAtStart = Atomic<Int>(-1)
        let sink = BlockOperation { seenAtStart.store(finished.load(ordering: .acquiring), ordering: .releasing) }
        let sources = (0..<count).map { _ in
            BlockOperation { finished.add(1, ordering: .releasing) }
        }
        for source in sources { sink.addDependency(source) }
        queue.addOperations([sink] + sources, waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(20)))
        #expect(seenAtStart.load(ordering: .acquiring) == count, "the sink started before all of its dependencies finished")
    }

    @Test("a dependents list matches a plain array through growth, removals in any order and compaction", arguments: [1, 2, 3])
    func dependentListModel(seed: UInt64) {
        // Every operation lives for the whole test, so the list's unretained
        // entries stay valid; the list is used without a lock because
        // nothing else can reach it.
        let pool = (0..<400).map { _ in Operation() }
        var list = DependentList.empty
        var model: [ObjectIdentifier] = []
        var random = SeededRandom(seed: seed)
        for step in 0..<6_000 {
            let operation = pool[random.next(below: pool.count)]
            let id = ObjectIdentifier(operation)
            // Mostly appends early on, mostly removals later, so that the
            // list grows, is indexed, and compacts.
            let appendChance = step < 3_000 ? 7 : 3
            if random.next(below: 10) < appendChance, !model.contains(id) {
                list.append(operation)
                model.append(id)
            } else {
                let removed = list.remove(operation)
                #expect(removed == model.contains(id), "step \(step): remove disagreed with the model")
                model.removeAll { $0 == id }
            }
            #expect(list.count == model.count)
            if step % 97 == 0 {
                var seen: [ObjectIdentifier] = []
                list.forEach { seen.append(ObjectIdentifier($0.takeUnretainedValue())) }
                #expect(seen == model, "step \(step): the list lost its order or an entry")
                for probe in pool.prefix(20) {
                    #expect(list.contains(probe) == model.contains(ObjectIdentifier(probe)))
                }
            }
        }
    }
}

/// A small deterministic generator (SplitMix64) for model tests.
struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(below bound: Int) -> Int {
        Int(next() % UInt64(bound))
    }
}
