from freshindex.cli import main

main()
