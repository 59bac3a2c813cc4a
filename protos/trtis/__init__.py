"""Generated code package: modules built from the .proto files beside them."""
