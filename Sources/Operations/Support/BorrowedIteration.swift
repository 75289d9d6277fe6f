extension Collection where Element == Operation {
    /// Calls `body` with each operation, in order, without reference
    /// counting when the elements are stored contiguously (an array).
    ///
    /// The collection keeps every element alive for the whole call, so each
    /// slot's strong reference can be lent to `body` as it is: reading the
    /// slot as `Unmanaged` copies the pointer without a retain, where a
    /// `for` loop would retain and release every element (two atomic
    /// operations each, on lines other threads may be using). Other
    /// collections are iterated normally.
    @inline(__always)
    func forEachBorrowed(_ body: (Operation) -> Void) {
        let iterated: Void? = withContiguousStorageIfAvailable { buffer in
            for index in buffer.indices { borrowedSlot(buffer, index)._withUnsafeGuaranteedRef(body) }
        }
        if iterated == nil {
            for operation in self { body(operation) }
        }
    }
}

extension Array where Element == Operation {
    /// Calls `body` with each operation, last first, borrowed as in
    /// `forEachBorrowed(_:)`, until it returns false.
    @inline(__always)
    func forEachBorrowedInReverse(while body: (Operation) -> Bool) {
        withUnsafeBufferPointer { buffer in
            for index in buffer.indices.reversed() where !borrowedSlot(buffer, index)._withUnsafeGuaranteedRef(body) {
                return
            }
        }
    }
}

/// Slot `index` of `buffer` as an unretained reference (see
/// `Collection.forEachBorrowed(_:)`); the buffer's owner keeps it alive.
@inline(__always)
private func borrowedSlot(_ buffer: UnsafeBufferPointer<Operation>, _ index: Int) -> Unmanaged<Operation> {
    UnsafeRawPointer(buffer.baseAddress!).load(fromByteOffset: index &* MemoryLayout<Operation>.stride, as: Unmanaged<Operation>.self)
}
