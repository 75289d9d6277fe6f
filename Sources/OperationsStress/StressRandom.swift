/// A small, fast, seeded pseudo-random generator (SplitMix64) for the stress
/// engine.
///
/// It is written here rather than taken from the standard library so that a
/// seed produces the same sequence on every platform and toolchain: the
/// standard library's `random(in:using:)` algorithms are not guaranteed to be
/// stable across releases, so the engine uses only the helpers below.
public struct StressRandom: Sendable, Hashable {
    /// The generator's whole state.
    public private(set) var state: UInt64

    /// Creates a generator whose sequence is determined by `seed`.
    public init(seed: UInt64) {
        state = seed
    }

    /// A generator for an independent stream derived from this seed, such as
    /// one per chaos thread. Deterministic in `seed` and `stream`.
    public init(seed: UInt64, stream: UInt64) {
        var mixer = StressRandom(seed: seed ^ (stream &* 0xD1B5_4A32_D192_ED03))
        state = mixer.next() ^ stream
    }

    /// The next 64 random bits (SplitMix64, Steele, Lea and Flood 2014).
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in `0 ..< bound` (`bound` > 0), by multiply-high reduction.
    public mutating func below(_ bound: Int) -> Int {
        precondition(bound > 0, "bound must be positive")
        let product = next().multipliedFullWidth(by: UInt64(bound))
        return Int(product.high)
    }

    /// A value in `range`.
    public mutating func int(in range: ClosedRange<Int>) -> Int {
        range.lowerBound + below(range.upperBound - range.lowerBound + 1)
    }

    /// True with probability `perMille` / 1000.
    public mutating func chance(perMille: Int) -> Bool {
        below(1000) < perMille
    }

    /// A uniformly chosen element of a non-empty array.
    public mutating func pick<T>(_ elements: [T]) -> T {
        elements[below(elements.count)]
    }
}

/// FNV-1a over 64-bit words: a stable fingerprint (the standard library's
/// `Hasher` is seeded per process, so it cannot identify a plan across runs).
struct Fingerprint {
    private(set) var value: UInt64 = 0xCBF2_9CE4_8422_2325

    mutating func combine(_ word: UInt64) {
        var word = word
        for _ in 0..<8 {
            value ^= word & 0xFF
            value = value &* 0x0000_0100_0000_01B3
            word >>= 8
        }
    }

    mutating func combine(_ word: Int) { combine(UInt64(bitPattern: Int64(word))) }
}
