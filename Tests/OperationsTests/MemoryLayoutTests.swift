// The size of a pending operation is a benchmark target (W8 in BENCHMARKS.md:
// at most 160 bytes per pending operation, closure included). It depends on
// the malloc size class of the instance, which one more stored property can
// push up by 16 bytes. These tests name the budget, so that such a change is
// a deliberate decision rather than a surprise in the next benchmark run.

import Testing
@testable import Operations

#if canImport(Glibc)
import Glibc

@_silgen_name("malloc_usable_size")
private func mallocUsableSize(_ pointer: UnsafeMutableRawPointer) -> Int

/// The bytes malloc reserved for `object` (its chunk, less the chunk header).
private func allocatedSize(of object: AnyObject) -> Int {
    mallocUsableSize(Unmanaged.passUnretained(object).toOpaque())
}

/// The smallest chunk malloc gives an object made by `make`, over a few
/// allocations kept alive together. One allocation alone may get a larger
/// chunk than its size class: glibc hands out a whole free chunk when the
/// rest would be too small to split off, and the tests running alongside
/// leave such chunks behind (one run read 104 bytes for a plain
/// `Operation`, whose class is 88).
private func smallestAllocatedSize(_ make: () -> AnyObject) -> Int {
    let objects = (0..<32).map { _ in make() }
    return objects.map(allocatedSize(of:)).min() ?? 0
}

@Suite("Memory per operation")
struct MemoryLayoutTests {
    @Test("a BlockOperation fits a 112-byte malloc chunk, before and after it joins a queue")
    func blockOperationSize() {
        let operations = (0..<32).map { _ in BlockOperation {} }
        #expect(operations.map(allocatedSize(of:)).min()! <= 104)
        let queue = OperationQueue()
        queue.isSuspended = true
        queue.addOperations(operations, waitUntilFinished: false)
        #expect(operations.map(allocatedSize(of:)).min()! <= 104)
        queue.cancelAllOperations()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a plain Operation fits a 96-byte malloc chunk")
    func operationSize() {
        #expect(smallestAllocatedSize { Operation() } <= 88)
    }

    @Test("the queue's record in each operation is five words")
    func queueLinkSize() {
        #expect(MemoryLayout<QueueLink>.size <= 40)
        #expect(MemoryLayout<MembershipAndExtras>.size == 8)
        #expect(MemoryLayout<DependentList>.size == 8)
        #expect(MemoryLayout<OperationList>.size == 8)
    }
}
#endif
