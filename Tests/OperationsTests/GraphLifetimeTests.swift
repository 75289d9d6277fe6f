import Testing
@testable import Operations

@Suite("graph lifetimes")
struct GraphLifetimeTests {
    @Test("a dependency graph that never runs is released, without deep recursion")
    func unrunChainReleased() {
        weak var first: Operation?
        weak var last: Operation?
        do {
            var previous = BlockOperation {}
            first = previous
            for _ in 0..<200_000 {
                let next = BlockOperation {}
                next.addDependency(previous)
                previous = next
            }
            last = previous
            #expect(first != nil)
        }
        #expect(last == nil)
        #expect(first == nil)
    }

    @Test("a released dependent does not stop its dependency from finishing")
    func releasedDependent() {
        let dependency = BlockOperation {}
        weak var dependent: Operation?
        do {
            let strong = BlockOperation {}
            strong.addDependency(dependency)
            dependent = strong
        }
        #expect(dependent == nil)
        dependency.start()
        #expect(dependency.isFinished)
    }
}
