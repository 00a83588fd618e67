from infbench.cli import main

main()
