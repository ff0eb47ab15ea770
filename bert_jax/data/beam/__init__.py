"""Apache Beam preparation of corpora past one machine: documents, the WordPiece
vocabulary, NSP/MLM instances, and the runner options they share (DirectRunner here,
Dataflow/Flink/Spark for real corpora)."""
