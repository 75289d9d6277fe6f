// Stubs for the names the documentation's snippets leave to the reader.
// Scripts/check-docs.sh copies this file next to the extracted snippets
// (see extract.py); every snippet is compiled as if it imported Operations
// and Synchronization. Keep each stub as small as the snippets allow.
import Operations

/// A stand-in for Foundation's `URL`.
struct URL: Sendable {}
/// A stand-in for Foundation's `Data`.
struct Data: Sendable {}

let url = URL()
let page = 1

/// A callback-based download, as in the README's `AsyncOperation` example.
func fetch(_ url: URL, completion: @escaping @Sendable (Data) -> Void) {
    completion(Data())
}

func store(_ data: Data) {}
func resizeStoredImage() {}
func render(_ page: Int) async throws -> String { "page \(page)" }
func loadImage(_ url: URL) throws -> Data { Data() }
func thumbnail(of data: Data) -> Data { data }

/// An HTTP-like client with an `async` API.
struct Client: Sendable {
    func data(from url: URL) async throws -> Data { Data() }
    func fetch(_ url: URL, completion: @escaping @Sendable (Data) -> Void) { completion(Data()) }
}
let client = Client()

/// A decoded model and its decoder.
struct Model: Sendable {}
enum JSONish {
    static func decode(_ data: Data) throws -> Model { Model() }
}

/// A logger with swift-log's shape.
struct Logger: Sendable {
    func error(_ message: @autoclosure () -> String) {}
    func warning(_ message: @autoclosure () -> String) {}
}
let logger = Logger()

/// A queue and an operation that snippets use without declaring them.
let queue = OperationQueue()
let operation = BlockOperation()

/// Work that snippets run without saying what it is.
func runTheWork() {}
