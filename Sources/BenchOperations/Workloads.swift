#if ENGINE_FOUNDATION
import Foundation
#else
import Operations
#endif

/// Placeholder: the benchmark workloads (shared source, two engines).
public enum Workloads {}
