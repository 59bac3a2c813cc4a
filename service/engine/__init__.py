"""The engine process: the one ``InferenceServer`` every frontend process talks to."""
