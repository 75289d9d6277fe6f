public enum Stress {}
