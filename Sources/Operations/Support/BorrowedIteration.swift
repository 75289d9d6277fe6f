extension Collection where Element == Operation {
    /// Calls `body` with each operation, in order, without reference
    /// counting when the elements are stored contiguously (an array).
    ///
    /// The collection keeps every element alive for the whole call, so each
    /// slot's strong reference can be lent to `body` as it is: reading the
    /// slot as `Unmanaged` copies the pointer without a retain, where a
    /// `for` loop would retain and release every element (two atomic
    /// operations each). Other collections are iterated normally.
    @inline(__always)
    func forEachBorrowed(_ body: (Operation) -> Void) {
        let iterated: Void? = withContiguousStorageIfAvailable { buffer in
            guard let base = buffer.baseAddress else { return }
            let slots = UnsafeRawPointer(base)
            for index in 0..<buffer.count {
                slots.load(fromByteOffset: index &* MemoryLayout<Operation>.stride, as: Unmanaged<Operation>.self)
                    ._withUnsafeGuaranteedRef(body)
            }
        }
        if iterated == nil {
            for operation in self { body(operation) }
        }
    }
}
