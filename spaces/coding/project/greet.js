// Prints a greeting for the name given on the command line.
const name = process.argv[2] ?? "there";
console.log(`Hello, ${name}!`);
