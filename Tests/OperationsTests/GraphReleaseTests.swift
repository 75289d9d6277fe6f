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
}
