import Synchronization
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

    @Test("a strong reference to a deinitializing object is refused, without a weak reference")
    func tryRetainRefusesDeinitializingObjects() {
        #expect(RuntimeTryRetain.usesRuntimeEntryPoint, "swift_tryRetain should be found on this platform")
        let seenInDeinit = Mutex<Bool?>(nil)
        final class Probe: Sendable {
            let report: @Sendable (Bool) -> Void
            init(report: @escaping @Sendable (Bool) -> Void) { self.report = report }
            deinit { report(RuntimeTryRetain.strongReference(to: self) != nil) }
        }
        weak var released: Probe?
        do {
            let probe = Probe { got in seenInDeinit.withLock { $0 = got } }
            released = probe
            // A live object: the reference is taken and given back.
            let strong = RuntimeTryRetain.strongReference(to: probe)
            #expect(strong === probe)
        }
        #expect(released == nil, "the reference taken from a live object was not given back")
        #expect(seenInDeinit.withLock { $0 } == false, "a deinitializing object was retained")
    }
}
