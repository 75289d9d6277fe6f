/// The documents the demos reproduce: the specification this project
/// implements. Each is named by its title and its author or publisher, as far
/// as the document itself names them.
enum DemoSource: Sendable {
    /// Apple's chapter, the reference: the demos cite its listings by number.
    case appleOperationQueues
    /// The article whose `MLAsyncOperation` finishes itself from a callback.
    case asyncOperationArticle
    /// The article that records the exact sequences of state changes, runs
    /// serial queues and sells train tickets under a lock.
    case stateSequencesArticle
    /// The blog post that builds a concurrent operation on a thread of its
    /// own and runs operations in a suspended queue.
    case concurrentOperationArticle

    /// The title and author or publisher, for a demo's header.
    var citation: String {
        switch self {
        case .appleOperationQueues:
            "Apple, Concurrency Programming Guide, chapter \"Operation Queues\""
        case .asyncOperationArticle:
            "\"構造異步NSOperation進行異步任務調度\" (building asynchronous NSOperations to schedule "
                + "asynchronous tasks), a Chinese-language article on Jianshu (簡書), author not named"
        case .stateSequencesArticle:
            "an untitled Chinese-language article on NSOperation and NSOperationQueue, "
                + "author and publisher not named"
        case .concurrentOperationArticle:
            "\"NSOperation\", a Chinese-language post on a WordPress.com blog, author not named"
        }
    }
}

/// A part of a source that a demo reproduces.
struct DemoCitation: Sendable {
    let source: DemoSource
    /// The section, listing or example, in the source's own words.
    let part: String

    init(_ source: DemoSource, _ part: String) {
        self.source = source
        self.part = part
    }

    var text: String { source.citation + ": " + part }
}
