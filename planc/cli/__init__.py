"""The process side: the click commands, the error boundary, file discovery and check's reporters."""
