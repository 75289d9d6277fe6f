// Stubs for the integration snippets (README's "Integrations"), compiled
// with the traits Logging, Metrics and Tracing on (see extract.py).
import CoreMetrics
import Operations
import Tracing

/// A queue and an operation that snippets use without declaring them.
let queue = OperationQueue()
let resize = BlockOperation {}

/// The factory and tracer a program would bootstrap.
let myFactory: any MetricsFactory = NOOPMetricsHandler.instance
let myTracer = NoOpTracer()
