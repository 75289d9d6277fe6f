import Testing
@testable import Operations
@Test func smoke() { #expect(BlockOperation().isReady) }
