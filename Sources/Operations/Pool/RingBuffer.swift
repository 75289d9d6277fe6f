/// A growable first-in-first-out buffer.
///
/// - Complexity: `append` and `popFirst` are amortized O(1).
struct RingBuffer<Element> {
    private var storage: [Element?] = []
    private var head = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// The element `popFirst()` would return, left in place.
    var first: Element? { count > 0 ? storage[head] : nil }

    mutating func append(_ element: Element) {
        if count == storage.count { grow() }
        storage[(head + count) % storage.count] = element
        count += 1
    }

    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let element = storage[head]
        storage[head] = nil
        head = (head + 1) % storage.count
        count -= 1
        return element
    }

    private mutating func grow() {
        let newCapacity = max(8, storage.count * 2)
        var grown = [Element?](repeating: nil, count: newCapacity)
        for offset in 0..<count {
            grown[offset] = storage[(head + offset) % storage.count]
        }
        storage = grown
        head = 0
    }
}
