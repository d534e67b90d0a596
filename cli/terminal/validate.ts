/**
 * The early check of edited arguments against a tool's input schema, before they are sent:
 * the gateway's own checker (gateway/wire/arguments-schema.ts), which decides again on
 * arrival. Here so a typo is caught at the keyboard, without a round trip.
 */
export { schemaProblem } from "../../gateway/index.js";
